package api_test

// The shared HTTP table (routertest) against this package's std-http server on a real listener.

import (
	"net"
	"net/http"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-std-http/api"
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
		Name:   "std-http",
		Tenant: routertest.TenantFromContext,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			h := api.NewIdempotentHandler(impl(b), store, nil)
			// Authentication wraps the generated handler: it runs before any key is claimed.
			auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tenant := r.Header.Get(routertest.TenantHeader)
				if tenant == "" {
					http.Error(w, "no tenant", http.StatusUnauthorized)
					return
				}
				h.ServeHTTP(w, r.WithContext(routertest.WithTenant(r.Context(), tenant)))
			})
			routertest.ServeHTTP(t, ln, auth)
		},
	}
}
