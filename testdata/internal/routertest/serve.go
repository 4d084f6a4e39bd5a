package routertest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
)

type tenantKey struct{}

// WithTenant returns ctx carrying tenant, for routers whose auth middleware stores the tenant in
// the request's context; TenantFromContext is their Config.Tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFromContext reads what WithTenant stored.
func TenantFromContext(ctx context.Context) (string, error) {
	if t, ok := ctx.Value(tenantKey{}).(string); ok && t != "" {
		return t, nil
	}
	return "", errors.New("routertest: no tenant in the request's context")
}

// TenantKey is the string key under which routers with a per-request store of their own (gin's
// c.Set, iris's ctx.Values()) keep the tenant; TenantFromFrameworkStore is their Config.Tenant,
// which finds it through the ctx the generated code passes.
const TenantKey = "tenant"

// TenantFromFrameworkStore reads ctx.Value(TenantKey).
func TenantFromFrameworkStore(ctx context.Context) (string, error) {
	if t, ok := ctx.Value(TenantKey).(string); ok && t != "" {
		return t, nil
	}
	return "", errors.New("routertest: no tenant under the key " + TenantKey)
}

// ServeHTTP serves h on ln until the test ends, for every router whose server is an
// http.Handler.
func ServeHTTP(t *testing.T, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving on %s: %v", ln.Addr(), err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
}
