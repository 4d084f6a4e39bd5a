package api_test

// The shared HTTP table (routertest) against this package's iris server on a real listener.

import (
	"net"
	"net/http"
	"testing"

	"github.com/kataras/iris/v12"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-iris/api"
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
		Name: "iris",
		// The strict handler passes the iris.Context, whose Value finds ctx.Values()'s keys.
		Tenant: routertest.TenantFromFrameworkStore,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			app := iris.New()
			app.Logger().SetLevel("disable")
			app.Use(func(ctx iris.Context) {
				tenant := ctx.GetHeader(routertest.TenantHeader)
				if tenant == "" {
					ctx.StopWithStatus(http.StatusUnauthorized)
					return
				}
				ctx.Values().Set(routertest.TenantKey, tenant)
				ctx.Next()
			})
			api.RegisterIdempotentHandlers(app, impl(b), store, nil)
			if err := app.Build(); err != nil {
				t.Fatal(err)
			}
			routertest.ServeHTTP(t, ln, app)
		},
	}
}
