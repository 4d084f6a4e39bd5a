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
	routertest.Run(t, routertest.Router{
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
			api.RegisterIdempotentHandlers(e, server{b}, store, nil)
			routertest.ServeHTTP(t, ln, e)
		},
	})
}
