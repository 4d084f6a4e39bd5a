package idemhttp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// answer is a response object for Handle in these tests.
type answer struct{ status int }

func recordAnswer(a answer) (*idem.Outcome, error) { return &idem.Outcome{Status: a.status}, nil }

// TestValuesTextCannotHoldAre400 pins issue 9: a NUL byte or invalid UTF-8 in a path parameter,
// a header, a query value or the tenant is answered 400 request-invalid before anything is
// claimed; and the same value reaching the handler's own SQL (here: an operation that does not
// fingerprint it) is answered 400 too, not 500, with the key released.
func TestValuesTextCannotHoldAre400(t *testing.T) {
	t.Parallel()
	type tenantKey struct{}
	e := newEnv(t, &idem.Config{Tenant: func(ctx context.Context) (string, error) {
		if t, ok := ctx.Value(tenantKey{}).(string); ok {
			return t, nil
		}
		return "acme", nil
	}}, nil)
	ctx := context.Background()
	p := &idemhttp.Policy{
		Operation:   "capturePayment",
		Route:       "POST /v1/payments/{payment_id}/capture",
		Key:         idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
		ScopeTenant: true,
	}
	ran := 0
	op := func(key, account string, parts ...any) *idemhttp.Op[answer] {
		return &idemhttp.Op[answer]{
			Key:   key,
			Scope: []idemhttp.Part{{Name: "operation"}, {Name: "header:X-Account", Value: account}},
			Parts: []idemhttp.Part{{Name: "path:payment_id", Value: parts[0]}, {Name: "query:tags", Value: parts[1]}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				ran++
				_, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 1)", parts[0])
				return answer{201}, err
			},
			Record: recordAnswer,
		}
	}
	nul, notUTF8 := "ab\x00cd", "t\xff"
	for _, c := range []struct {
		name, what string
		ctx        context.Context
		op         *idemhttp.Op[answer]
	}{
		{"NUL in a path parameter", "path parameter payment_id", ctx, op("k1", "acct", nul, []string(nil))},
		{"NUL behind a pointer", "path parameter payment_id", ctx, op("k2", "acct", &nul, []string(nil))},
		{"invalid UTF-8 in a query list", "query parameter tags", ctx, op("k3", "acct", "pay_1", []string{"ok", notUTF8})},
		{"invalid UTF-8 in a scope header", "header X-Account", ctx, op("k4", notUTF8, "pay_1", []string(nil))},
		{"invalid UTF-8 in the tenant", "tenant", context.WithValue(ctx, tenantKey{}, notUTF8), op("k5", "acct", "pay_1", []string(nil))},
		{"a tenant of a NUL byte", "tenant", context.WithValue(ctx, tenantKey{}, "\x00"), op("k6", "acct", "pay_1", []string(nil))},
	} {
		r, err := idemhttp.Handle(c.ctx, e.Store, p, c.op)
		if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeRequestInvalid || r.Problem.Status != 400 {
			t.Errorf("%s: Handle = %+v, %v; want the 400 request-invalid problem", c.name, r, err)
			continue
		}
		if !strings.Contains(r.Problem.Detail, c.what) || r.Problem.Title != idemhttp.ProblemTitle(idemhttp.CodeRequestInvalid) {
			t.Errorf("%s: problem %+v; want a detail naming the %s", c.name, r.Problem, c.what)
		}
	}
	if ran != 0 || e.Keys() != 0 {
		t.Fatalf("the handler ran %d times and %d keys were claimed for requests with values that are not text; want none", ran, e.Keys())
	}
	// Valid UTF-8 beyond ASCII is text.
	if r, err := idemhttp.Handle(ctx, e.Store, p, op("k7", "compte-é", "pay_é", []string{"ünï"})); err != nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("non-ASCII UTF-8 = %+v, %v; want executed", r, err)
	}

	// Values the runtime does not check (fingerprint: false leaves the path parameter out) reach
	// the handler's SQL, which refuses them: still 400, and the key is given back.
	unprinted := *p
	for _, c := range []struct {
		name, sql string
		arg       any
	}{
		{"NUL into text (22021)", "INSERT INTO payments (key, amount) VALUES ($1, 2)", nul},
		{"invalid UTF-8 into text (22021)", "INSERT INTO payments (key, amount) VALUES ($1, 2)", notUTF8},
		{"NUL escape into jsonb (22P05)", `SELECT $1::jsonb`, `{"a": "\u0000"}`},
	} {
		o := &idemhttp.Op[answer]{
			Key: "k-" + c.name, Scope: []idemhttp.Part{{Name: "operation"}, {Name: "header:X-Account", Value: "acct"}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				_, err := tx.Exec(ctx, c.sql, c.arg)
				return answer{201}, err
			},
			Record: recordAnswer,
		}
		r, err := idemhttp.Handle(ctx, e.Store, &unprinted, o)
		if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeRequestInvalid || r.Problem.Status != 400 {
			t.Errorf("%s: Handle = %+v, %v; want the 400 request-invalid problem", c.name, r, err)
		}
	}
	if n := e.Keys(); n != 1 {
		t.Fatalf("%d key rows; want only the executed request's (a refused handler releases its key)", n)
	}
}

// TestErrorProblemClassifiesHandlerErrors: ErrorProblem, for operations that are not idempotent,
// gives the answers an idempotent one gets, from real PostgreSQL errors.
func TestErrorProblemClassifiesHandlerErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	_, textErr := e.Sch.Pool.Exec(ctx, "SELECT $1::text", "ab\x00cd")
	_, jsonErr := e.Sch.Pool.Exec(ctx, "SELECT $1::jsonb", `{"a": "\u0000"}`)
	_, missingErr := e.Sch.Pool.Exec(ctx, "SELECT * FROM no_such_table")

	// A connection killed under a statement (what a restarting server or a failover does).
	conn, err := e.Sch.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, killedErr := conn.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	conn.Release()
	closed := idemtestPool(t, e)
	_, closedErr := closed.Exec(ctx, "SELECT 1")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, cancelErr := e.Sch.Pool.Exec(cancelled, "SELECT 1")

	own := idemhttp.NewProblem(409, idemhttp.CodeKeyReused, "mine")
	for _, c := range []struct {
		name string
		err  error
		code string // "" for nil
	}{
		{"NUL into text", textErr, idemhttp.CodeRequestInvalid},
		{"NUL escape into jsonb", jsonErr, idemhttp.CodeRequestInvalid},
		{"a killed connection", killedErr, idemhttp.CodeStoreUnavailable},
		{"a closed pool", closedErr, idemhttp.CodeStoreUnavailable},
		{"ErrStoreUnavailable", idem.ErrStoreUnavailable, idemhttp.CodeStoreUnavailable},
		{"a missing table", missingErr, ""},
		{"the client went away", cancelErr, ""},
		{"an error of the application's", errors.New("upstream said no"), ""},
		{"a problem returned as an error", own, idemhttp.CodeKeyReused},
	} {
		if c.err == nil {
			t.Fatalf("%s: the statement did not fail", c.name)
		}
		p := idemhttp.ErrorProblem(c.err)
		switch {
		case c.code == "" && p != nil:
			t.Errorf("%s (%v): ErrorProblem = %+v; want nil (the application's own answer)", c.name, c.err, p)
		case c.code != "" && (p == nil || p.Code != c.code):
			t.Errorf("%s (%v): ErrorProblem = %+v; want %s", c.name, c.err, p, c.code)
		}
	}
	if p := idemhttp.ErrorProblem(killedErr); p.Status != 503 || p.RetryAfter <= 0 {
		t.Errorf("outage problem %+v; want 503 with a Retry-After", p)
	}
	if p := idemhttp.ErrorProblem(textErr); p.Status != 400 {
		t.Errorf("text problem %+v; want 400", p)
	}
}
