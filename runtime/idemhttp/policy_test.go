package idemhttp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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

	unnamed := policy()
	unnamed.Operation = ""
	err = idemhttp.Check(withTenant, unnamed, nil)
	for _, w := range []string{"Operation is empty", "policy 1 is nil"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Check(unnamed, nil) = %v; want it to say %q", err, w)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Errorf("Check reported %d problems, want 2 (all at once):\n%v", n, err)
	}
	var nilStore *idem.Store
	if err := idemhttp.Check(nilStore, policy()); err == nil || !strings.Contains(err.Error(), "Store is nil") {
		t.Errorf("nil store: %v", err)
	}
}

// TestCheckOp pins the shape NewIdempotentServer checks once per generated operation: one of Run
// and RunReference, matching the storage, a Replay where the storage needs one, a Record, and
// parts named in the forms Handle reads, each once.
func TestCheckOp(t *testing.T) {
	t.Parallel()
	run := func(context.Context, pgx.Tx) (answer, error) { return answer{201}, nil }
	runRef := func(context.Context, pgx.Tx) (answer, string, error) { return answer{201}, "r", nil }
	replay := func(context.Context, string, int) (answer, error) { return answer{200}, nil }
	ref := policy()
	ref.Storage = idemhttp.StorageReference
	good := &idemhttp.Op[answer]{
		Scope:  []idemhttp.Part{{Name: "operation"}, {Name: "header:X-Account", Value: "a"}, {Name: "path:id", Value: "1"}},
		Parts:  []idemhttp.Part{{Name: "path:id", Value: "1"}, {Name: "query:q"}, {Name: "header:X-Trace"}},
		Run:    run,
		Record: recordAnswer,
	}
	if err := idemhttp.CheckOp(policy(), good); err != nil {
		t.Errorf("a well-formed operation: %v", err)
	}
	if err := idemhttp.CheckOp(ref, &idemhttp.Op[answer]{RunReference: runRef, Replay: replay, Record: recordAnswer}); err != nil {
		t.Errorf("a well-formed reference operation: %v", err)
	}
	for _, c := range []struct {
		name string
		p    *idemhttp.Policy
		op   *idemhttp.Op[answer]
		want string
	}{
		{"neither handler", policy(), &idemhttp.Op[answer]{Record: recordAnswer}, "exactly one of Run and RunReference"},
		{"both handlers", ref, &idemhttp.Op[answer]{Run: run, RunReference: runRef, Replay: replay, Record: recordAnswer}, "exactly one of Run and RunReference"},
		{"Run for reference storage", ref, &idemhttp.Op[answer]{Run: run, Replay: replay, Record: recordAnswer}, "RunReference is for reference storage"},
		{"no Replay for reference storage", ref, &idemhttp.Op[answer]{RunReference: runRef, Record: recordAnswer}, "Replay must be set"},
		{"a Replay for response storage", policy(), &idemhttp.Op[answer]{Run: run, Replay: replay, Record: recordAnswer}, "Replay must be set"},
		{"no Record", policy(), &idemhttp.Op[answer]{Run: run}, "Record is nil"},
		{"a query scope", policy(), &idemhttp.Op[answer]{Run: run, Record: recordAnswer, Scope: []idemhttp.Part{{Name: "query:q"}}}, `scope part "query:q" is not a part`},
		{"an operation fingerprint part", policy(), &idemhttp.Op[answer]{Run: run, Record: recordAnswer, Parts: []idemhttp.Part{{Name: "operation"}}}, `fingerprint part "operation" is not a part`},
		{"a part twice", policy(), &idemhttp.Op[answer]{Run: run, Record: recordAnswer, Parts: []idemhttp.Part{{Name: "path:id"}, {Name: "path:id"}}}, `fingerprint part "path:id" is listed twice`},
		{"a nameless part", policy(), &idemhttp.Op[answer]{Run: run, Record: recordAnswer, Scope: []idemhttp.Part{{Name: "header:"}}}, `scope part "header:" is not a part`},
	} {
		if err := idemhttp.CheckOp(c.p, c.op); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckOp = %v; want it to say %q", c.name, err, c.want)
		}
	}
}
