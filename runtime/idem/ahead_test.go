package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestClaimAhead: Store.ClaimAhead, the claim idemhttp's edge makes before the router, answers a
// completed key whose fingerprint matches at once, as Do would (the stored outcome, an early
// replayed event, the history count). Any other answer is Do's to give: another fingerprint, a key
// in flight; a new key's claim is taken by Do (which runs the handler once, without claiming
// again), or given back by Drop when the request never reaches Do. An empty key is not claimed.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	for _, cache := range []bool{false, true} {
		t.Run(map[bool]string{false: "store", true: "replay cache"}[cache], func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var events []idem.Event
			cfg := &idem.Config{Observer: func(_ context.Context, ev idem.Event) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, ev)
			}}
			if cache {
				cfg.ReplayCacheBytes = 1 << 20
			}
			e := newEnv(t, cfg, nil)
			ctx := context.Background()
			p := func(key, fp string) *idem.DoParams {
				return &idem.DoParams{Scope: "s", Key: key, Operation: "op", Fingerprint: fp, History: true}
			}
			replayed := func() (n, early int) {
				mu.Lock()
				defer mu.Unlock()
				for _, ev := range events {
					if ev.Kind == idem.EventReplayed {
						n++
						if ev.Early {
							early++
						}
					}
				}
				return n, early
			}

			// A new key: claimed ahead, then taken by Do, which runs the handler once.
			r, a := e.Store.ClaimAhead(ctx, p("k", "fp"))
			if r != nil || a == nil {
				t.Fatalf("a key without a row: %+v, %v; want no answer and a claim for Do", r, a)
			}
			ran := 0
			if _, err := e.Store.Do(idem.WithAhead(ctx, a), p("k", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				ran++
				return &idem.Outcome{Status: 201, Body: []byte(`{"id":"1"}`)}, nil
			}); err != nil || ran != 1 {
				t.Fatalf("Do with the claim made ahead: %v, the handler ran %d times; want it run once", err, ran)
			}
			a.Drop(ctx) // taken by Do: nothing to give back
			if cache {
				// The cache keeps what a replay read: fill it through Do's own replay first.
				if _, err := e.Store.Do(ctx, p("k", "fp"), nil); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := replayed()
			r, a = e.Store.ClaimAhead(ctx, p("k", "fp"))
			if a != nil || r == nil || !r.Replayed || r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":"1"}` {
				t.Fatalf("a completed key, same fingerprint: %+v, %v; want the stored 201 replayed", r, a)
			}
			if n, early := replayed(); n != before+1 || early != 1 {
				t.Errorf("after the early replay: %d replayed events (%d early), want %d (1 early)", n, early, before+1)
			}
			r, a = e.Store.ClaimAhead(ctx, p("k", "other"))
			if r != nil || a == nil {
				t.Fatalf("another fingerprint: %+v, %v; want a claim for Do", r, a)
			}
			if _, err := e.Store.Do(idem.WithAhead(ctx, a), p("k", "other"), nil); !errors.Is(err, idem.ErrKeyReused) {
				t.Errorf("Do with a mismatch found ahead: %v; want ErrKeyReused", err)
			}
			if r, a := e.Store.ClaimAhead(ctx, p("", "fp")); r != nil || a != nil {
				t.Errorf("an empty key: %+v, %v; want nothing claimed", r, a)
			}
			// A new key whose request never reaches Do: Drop gives it back, and a later request
			// with it runs.
			// A key in flight: its handler holds it while ClaimAhead looks.
			inside, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := e.Store.Do(ctx, p("held", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					close(inside)
					<-release
					return &idem.Outcome{Status: 201}, nil
				})
				done <- err
			}()
			<-inside
			r, a = e.Store.ClaimAhead(ctx, p("held", "fp"))
			_, err := e.Store.Do(idem.WithAhead(ctx, a), p("held", "fp"), nil)
			close(release)
			if r != nil || !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("a key in flight: %+v, then Do %v; want no answer, then ErrInProgress", r, err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n, early := replayed(); n != before+1 || early != 1 {
				t.Errorf("lookups that found no replay reported %d replayed events (%d early), want %d (1)", n, early, before+1)
			}
			// A dropped claim is not Do's to take either: Do, still handed it, claims anew.
			for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
				q := p("dropped-"+mode.String(), "fp")
				q.Claim = mode
				_, a = e.Store.ClaimAhead(ctx, q)
				a.Drop(ctx)
				a.Drop(ctx) // twice is harmless
				if _, err := e.Store.Do(idem.WithAhead(ctx, a), q, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					return &idem.Outcome{Status: 201}, nil
				}); err != nil {
					t.Fatalf("%s: a key given back by Drop: %v; want it free", mode, err)
				}
				if r, err := e.Store.Do(ctx, q, nil); err != nil || !r.Replayed {
					t.Fatalf("%s: the run after the drop was not kept: %+v, %v; want a replay", mode, r, err)
				}
			}
			// A claim made ahead for other params of the same key (which the edge never makes)
			// is given back, not taken: Do claims with its own fingerprint, which the key keeps.
			_, a = e.Store.ClaimAhead(ctx, p("other-params", "a"))
			if _, err := e.Store.Do(idem.WithAhead(ctx, a), p("other-params", "b"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				return &idem.Outcome{Status: 201}, nil
			}); err != nil {
				t.Fatalf("Do with a claim made ahead for another fingerprint: %v; want it to claim on its own", err)
			}
			if r, err := e.Store.Do(ctx, p("other-params", "b"), nil); err != nil || !r.Replayed {
				t.Fatalf("the key after Do's own claim: %+v, %v; want Do's fingerprint kept (a replay)", r, err)
			}
		})
	}
}

// TestClaimAheadCallerGone: a caller that left before the claim gets its context's error from
// Do, as its own claim would have given it.
func TestClaimAheadCallerGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"}
	r, a := e.Store.ClaimAhead(ctx, p)
	_, err := e.Store.Do(idem.WithAhead(ctx, a), p, nil)
	a.Drop(ctx)
	if r != nil || err == nil || errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("a caller that left: %+v, then Do %v; want its context's error, not ErrStoreUnavailable", r, err)
	}
}
