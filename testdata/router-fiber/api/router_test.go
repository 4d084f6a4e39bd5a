package api_test

// The shared HTTP table (routertest) against this package's fiber server on a real listener.

import (
	"net"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-fiber/api"
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
		Name: "fiber",
		// The strict handler passes c.UserContext(), where the auth middleware put the tenant.
		Tenant: routertest.TenantFromContext,
		Serve: func(t *testing.T, b *routertest.Backend, store *idem.Store, ln net.Listener) {
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			app.Use(func(c *fiber.Ctx) error {
				tenant := c.Get(routertest.TenantHeader)
				if tenant == "" {
					return c.SendStatus(fiber.StatusUnauthorized)
				}
				c.SetUserContext(routertest.WithTenant(c.UserContext(), tenant))
				return c.Next()
			})
			api.RegisterIdempotentHandlers(app, impl(b), store, nil)
			done := make(chan error, 1)
			go func() { done <- app.Listener(ln) }()
			t.Cleanup(func() {
				if err := app.Shutdown(); err != nil {
					t.Errorf("fiber shutdown: %v", err)
				}
				if err := <-done; err != nil {
					t.Errorf("fiber: %v", err)
				}
			})
		},
	}
}
