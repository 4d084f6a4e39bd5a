package api_test

// The shared HTTP table (routertest) against this package's gorilla server on a real listener.

import (
	"net"
	"net/http"
	"testing"

	"github.com/gorilla/mux"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-gorilla/api"
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
		Name:   "gorilla",
		Tenant: routertest.TenantFromContext,
		// The tenant comes from router middleware, which runs after the body capture.
		TenantInsideRouter: true,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			r := mux.NewRouter()
			// Router middleware runs after matching and before any key is claimed.
			r.Use(func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					tenant := r.Header.Get(routertest.TenantHeader)
					if tenant == "" {
						http.Error(w, "no tenant", http.StatusUnauthorized)
						return
					}
					next.ServeHTTP(w, r.WithContext(routertest.WithTenant(r.Context(), tenant)))
				})
			})
			routertest.ServeHTTP(t, ln, api.NewIdempotentHandler(impl(b), store, &api.IdempotentHandlerOptions{BaseRouter: r}))
		},
	}
}
