package idem_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestClaimOutcomes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, nil, nil)
	s, sch := e.store, e.sch
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
	if err != nil || r.Status != idem.ClaimMismatch {
		t.Fatalf("different fingerprint while in flight = %+v, %v; want mismatch", r, err)
	}

	tx, err := sch.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o := &idem.Outcome{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	if err := s.CompleteTx(ctx, tx, first, o, time.Hour); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r, err = s.Claim(ctx, p)
	if err != nil || r.Status != idem.ClaimReplay {
		t.Fatalf("claim after completion = %+v, %v; want replay", r, err)
	}
	if r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":1}` || r.Outcome.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed outcome = %+v; want the stored 201", r.Outcome)
	}
	r, err = s.Claim(ctx, &other)
	if err != nil || r.Status != idem.ClaimMismatch {
		t.Fatalf("different fingerprint after completion = %+v, %v; want mismatch", r, err)
	}
}
