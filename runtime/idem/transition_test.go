package idem_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Each transition of a key, held at its own level: these are rows of the guarantee table
// (guarantee_test.go), so they run on every claim path and topology, Citus's included.

// guaranteeUncertainOnlyAfterCall: under UncertainOnLoss, a handler that fails, times out or
// loses its claim BEFORE it asked for a provider key gives the key back like any other (a retry
// runs anew); only one that fails after the call leaves the key uncertain, and its timeout says
// so instead of "retry".
func guaranteeUncertainOnlyAfterCall(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	if mode == idem.ClaimTransaction {
		return // refused before any claim (guaranteeUncertain)
	}
	ctx := gctx(t)
	var runs atomic.Int32
	p := &idem.DoParams{Scope: "ua", Key: "before", Operation: "pay", Fingerprint: "fp", UncertainOnLoss: true, Timeout: 10 * time.Second}
	declined := errors.New("card declined before the call")
	if _, err := g.do(ctx, g.store, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return nil, declined
	}); !errors.Is(err, declined) || errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("a handler failing before its provider call: %v; want its own error, not uncertain", err)
	}
	if n := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'before'"); n != 0 {
		t.Fatalf("the key of a handler that failed before its provider call still has %d rows; want it given back", n)
	}
	if got := kinds(history(t, g.store, "ua", "before")); got != "acquired/1 released/1" {
		t.Fatalf("history: %s; want acquired/1 released/1", got)
	}
	if r, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil || r.Replayed || runs.Load() != 1 {
		t.Fatalf("its retry: %+v, %v, %d runs; want it to run anew", r, err, runs.Load())
	}

	// A handler that asked for its provider key and then ran past its timeout: the provider may
	// have acted, so the key is uncertain and the error says so (a client must not retry).
	q := *p
	q.Key, q.Timeout = "late", 200*time.Millisecond
	_, err := g.do(ctx, g.store, &q, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: "acquirer"}); err != nil {
			return nil, err
		}
		<-ctx.Done() // the provider's answer never comes
		return nil, ctx.Err()
	})
	if !errors.Is(err, idem.ErrHandlerTimeout) || !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("a handler timing out after its provider call: %v; want ErrHandlerTimeout and ErrUncertain", err)
	}
	if n := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'late' AND state = 'uncertain'"); n != 1 {
		t.Fatal("the key of a handler that timed out after its provider call is not uncertain")
	}
	if _, err := g.do(ctx, g.store, &q, counted(&runs, 0)); !errors.Is(err, idem.ErrUncertain) {
		t.Fatalf("its retry: %v; want ErrUncertain", err)
	}
}

// guaranteeNoCallAfterTakeover: a holder whose claim was taken over (its lease ran out before it
// asked for a provider key) is refused the provider key: only the key's holder may call.
func guaranteeNoCallAfterTakeover(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	if mode == idem.ClaimTransaction {
		return // a transaction-mode claim cannot be taken over while its transaction runs
	}
	ctx := gctx(t)
	slow := g.newStore(t)
	idem.DisableRenewal(slow)
	p := &idem.DoParams{Scope: "ut", Key: "taken", Operation: "pay", Fingerprint: "fp", UncertainOnLoss: true,
		Lease: 150 * time.Millisecond, Timeout: 10 * time.Second}
	entered, proceed := make(chan struct{}), make(chan struct{})
	release := letGo(t, proceed)
	asked := make(chan error, 1)
	first := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, slow, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-proceed
			_, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: "acquirer"})
			asked <- err
			if err != nil {
				return nil, err
			}
			return &idem.Outcome{Status: 201}, nil
		})
		first <- err
	}()
	recv(t, entered, 10*time.Second, "the first holder's handler never ran")
	time.Sleep(300 * time.Millisecond) // past its lease: it is as good as crashed
	taken, finish := make(chan struct{}), make(chan struct{})
	releaseSecond := letGo(t, finish)
	second := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, g.store, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(taken)
			<-finish
			return &idem.Outcome{Status: 201}, nil
		})
		second <- err
	}()
	recv(t, taken, 10*time.Second, "the retry never took the abandoned claim over")
	release()
	if err := recv(t, asked, 10*time.Second, "the first holder never asked for its provider key"); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("ProviderKey of a holder whose claim was taken over: %v; want ErrLeaseLost (it must not call the provider)", err)
	}
	releaseSecond()
	if err := recv(t, second, 10*time.Second, "the takeover never returned"); err != nil {
		t.Fatalf("the takeover: %v", err)
	}
	recv(t, first, 10*time.Second, "the first holder never returned")
	if n := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'taken' AND provider_at IS NOT NULL"); n != 0 {
		t.Fatal("the lost holder's provider call marked the key its successor holds")
	}
}

// guaranteeMismatchCounted: mismatched retries of a key that keeps a history are counted, like
// replays, in one row per flush, not a row (and a statement) each.
func guaranteeMismatchCounted(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	var runs atomic.Int32
	p := &idem.DoParams{Scope: "mc", Key: "k", Operation: "op", Fingerprint: "fp", Claim: mode, History: true}
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil {
		t.Fatal(err)
	}
	other := *p
	other.Fingerprint = "another"
	const n = 40
	for range n {
		if _, err := g.do(ctx, g.store, &other, counted(&runs, 0)); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("a mismatched retry: %v; want ErrKeyReused", err)
		}
	}
	idem.FlushReplays(g.store)
	evs := history(t, g.store, "mc", "k")
	if got := kinds(evs); got != "acquired/1 completed/1 key_reused/0" {
		t.Fatalf("history after %d mismatched retries: %s; want acquired/1 completed/1 key_reused/0 (one counted row)", n, got)
	}
	if ev := evs[2]; ev.Replays != n || !strings.Contains(ev.Detail, "another fingerprint") {
		t.Fatalf("the mismatches' row counts %d (%q); want %d, saying why", ev.Replays, ev.Detail, n)
	}
}
