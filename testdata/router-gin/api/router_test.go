package api_test

// The shared HTTP table (routertest) against this package's gin server on a real listener.

import (
	"net"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-gin/api"
)

func TestRouterTable(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	routertest.Run(t, router(func(b *routertest.Backend) api.IdempotentServerInterface { return server{b} }))
}

// TestUnimplementedOperations serves the generated UnimplementedIdempotentServer: every operation
// answers 501 not-implemented.
func TestUnimplementedOperations(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	routertest.RunUnimplemented(t, router(func(*routertest.Backend) api.IdempotentServerInterface {
		return api.UnimplementedIdempotentServer{}
	}))
}

// router is this package's wiring, serving impl(b).
func router(impl func(*routertest.Backend) api.IdempotentServerInterface) routertest.Router {
	return routertest.Router{
		Name: "gin",
		// The generated code hands the runtime a context whose Value also finds c.Set's keys.
		Tenant: routertest.TenantFromFrameworkStore,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			e := gin.New()
			e.Use(func(c *gin.Context) {
				tenant := c.GetHeader(routertest.TenantHeader)
				if tenant == "" {
					c.AbortWithStatus(http.StatusUnauthorized)
					return
				}
				c.Set(routertest.TenantKey, tenant)
			})
			api.RegisterIdempotentHandlers(e, impl(b), store, nil)
			routertest.ServeHTTP(t, ln, e)
		},
	}
}
