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
	routertest.Run(t, routertest.Router{
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
			api.RegisterIdempotentHandlers(e, server{b}, store, nil)
			routertest.ServeHTTP(t, ln, e)
		},
	})
}
