package api_test

// The shared HTTP table (routertest) against this package's echo5 server on a real listener.

import (
	"net"
	"net/http"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-echo5/api"
)

func TestRouterTable(t *testing.T) {
	routertest.Run(t, router(func(b *routertest.Backend) api.IdempotentServerInterface { return server{b} }))
}

// TestUnimplementedOperations serves the generated UnimplementedIdempotentServer: every operation
// answers 501 not-implemented.
func TestUnimplementedOperations(t *testing.T) {
	routertest.RunUnimplemented(t, router(func(*routertest.Backend) api.IdempotentServerInterface {
		return api.UnimplementedIdempotentServer{}
	}))
}

// router is this package's wiring, serving impl(b).
func router(impl func(*routertest.Backend) api.IdempotentServerInterface) routertest.Router {
	return routertest.Router{
		Name:   "echo5",
		Tenant: routertest.TenantFromContext,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			e := echo.New()
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c *echo.Context) error {
					tenant := c.Request().Header.Get(routertest.TenantHeader)
					if tenant == "" {
						return c.String(http.StatusUnauthorized, "no tenant")
					}
					c.SetRequest(c.Request().WithContext(routertest.WithTenant(c.Request().Context(), tenant)))
					return next(c)
				}
			})
			api.RegisterIdempotentHandlers(e, impl(b), store, nil)
			routertest.ServeHTTP(t, ln, e)
		},
	}
}
