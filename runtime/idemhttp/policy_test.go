package idemhttp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func TestCheckPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil) // no Config.Tenant
	tenantScoped := policy()
	tenantScoped.ScopeTenant = true
	if err := idemhttp.Check(e.Store, policy(), tenantScoped); err == nil ||
		!strings.Contains(err.Error(), "POST /v1/payments (createPayment): the scope includes the tenant, but Config.Tenant is nil") ||
		!strings.Contains(err.Error(), "&idem.Config{Tenant: func(ctx context.Context) (string, error)") ||
		!strings.Contains(err.Error(), "x-idempotency: {scope: [operation]}") {
		t.Fatalf("tenant scope without Config.Tenant: %v", err)
	}
	if err := idemhttp.Check(e.Store, policy()); err != nil {
		t.Fatalf("a valid policy: %v", err)
	}

	withTenant, err := idem.NewStore(e.Sch.Pool, &idem.Config{Schema: e.Sch.Name,
		Tenant: func(context.Context) (string, error) { return "t", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := idemhttp.Check(withTenant, tenantScoped); err != nil {
		t.Fatalf("tenant scope with Config.Tenant: %v", err)
	}

	wrong := policy()
	wrong.Storage = 7
	wrong.Claim = 9
	wrong.TTL = -time.Second
	wrong.Timeout = -time.Second
	wrong.MismatchStatus = 500
	wrong.Key.MaxLength = -1
	err = idemhttp.Check(withTenant, wrong, nil)
	want := []string{
		"Storage 7 is not", "Claim 9 is not", "TTL is negative (-1s)", "Timeout is negative (-1s)", "MismatchStatus 500 is not allowed",
		"Key.MaxLength is negative", "policy 1 is nil",
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Check(wrong values) = %v; want it to say %q", err, w)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(want) {
		t.Errorf("Check reported %d problems, want %d (all at once):\n%v", n, len(want), err)
	}
	var nilStore *idem.Store
	if err := idemhttp.Check(nilStore, policy()); err == nil || !strings.Contains(err.Error(), "Store is nil") {
		t.Errorf("nil store: %v", err)
	}
}
