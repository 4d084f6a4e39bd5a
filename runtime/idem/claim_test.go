package idem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestClaimOutcomes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := newEnv(t, nil, nil)
	s, sch := e.Store, e.Sch
	p := &idem.ClaimParams{Scope: "s", Key: "k1", Operation: "op", Fingerprint: "fp1", Lease: time.Second, TTL: time.Hour}

	r, err := s.Claim(ctx, p)
	if err != nil || r.Status != idem.ClaimAcquired || r.Claim.Attempt != 1 {
		t.Fatalf("first claim = %+v, %v; want acquired, attempt 1", r, err)
	}
	first := r.Claim

	r, err = s.Claim(ctx, p)
	if err != nil || r.Status != idem.ClaimInProgress || r.RetryAfter != time.Second {
		t.Fatalf("duplicate while in flight = %+v, %v; want in progress, retry after 1s", r, err)
	}
	other := *p
	other.Fingerprint = "fp2"
	r, err = s.Claim(ctx, &other)
	if err != nil || r.Status != idem.ClaimKeyReused {
		t.Fatalf("different fingerprint while in flight = %+v, %v; want mismatch", r, err)
	}

	tx, err := sch.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) // after a failed completion too: the pool closes only when tx ends
	o := &idem.Outcome{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	if err := s.CompleteTx(ctx, tx, first, o, time.Hour); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r, err = s.Claim(ctx, p)
	if err != nil || r.Status != idem.ClaimReplayed {
		t.Fatalf("claim after completion = %+v, %v; want replay", r, err)
	}
	if r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":1}` || r.Outcome.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed outcome = %+v; want the stored 201", r.Outcome)
	}
	r, err = s.Claim(ctx, &other)
	if err != nil || r.Status != idem.ClaimKeyReused {
		t.Fatalf("different fingerprint after completion = %+v, %v; want mismatch", r, err)
	}
}

// TestRequestPathStatementsNameTheTenant: complete and release find the row by tenant as well as
// scope, key and token (so each stays on one shard when the table is distributed by tenant): a
// claim presented under another tenant completes nothing and releases nothing.
func TestRequestPathStatementsNameTheTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	res, err := e.Store.Claim(ctx, &idem.ClaimParams{Tenant: "acme", Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"})
	if err != nil || res.Status != idem.ClaimAcquired {
		t.Fatalf("claim = %+v, %v", res, err)
	}
	wrong := idem.ClaimUnderTenant(res.Claim, "globex")

	err = pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
		return e.Store.CompleteTx(ctx, tx, wrong, &idem.Outcome{Status: 201}, 0)
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("complete under another tenant: %v; want ErrLeaseLost", err)
	}
	if err := e.Store.Release(ctx, wrong); err != nil {
		t.Fatalf("release under another tenant: %v", err)
	}
	var state, tenant string
	err = e.Sch.Pool.QueryRow(ctx, "SELECT state, tenant FROM "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" WHERE key = 'k'").Scan(&state, &tenant)
	if err != nil || state != "in_flight" || tenant != "acme" {
		t.Fatalf("row after a wrong-tenant complete and release: state %q tenant %q, %v; want acme's in-flight row untouched", state, tenant, err)
	}
	// The right tenant completes it.
	err = pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
		return e.Store.CompleteTx(ctx, tx, res.Claim, &idem.Outcome{Status: 201}, 0)
	})
	if err != nil {
		t.Fatalf("complete under the claim's own tenant: %v", err)
	}
}
