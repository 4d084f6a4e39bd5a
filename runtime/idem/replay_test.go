package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestReplayAnswersOnlyACompletedMatchingKey: Store.Replay, the read idemhttp's edge makes before
// the router, answers a completed key whose fingerprint matches, as Do would (the stored outcome,
// an early replayed event, the history count), and nothing else: no row, a key in flight, another
// fingerprint and an empty key are left to Do, with nothing counted or reported.
func TestReplayAnswersOnlyACompletedMatchingKey(t *testing.T) {
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

			if r, err := e.Store.Replay(ctx, p("k", "fp")); r != nil || err != nil {
				t.Fatalf("a key without a row: %+v, %v; want nil, nil", r, err)
			}
			if _, err := e.Store.Do(ctx, p("k", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				return &idem.Outcome{Status: 201, Body: []byte(`{"id":"1"}`)}, nil
			}); err != nil {
				t.Fatal(err)
			}
			if cache {
				// The cache keeps what a replay read: fill it through Do's own replay first.
				if _, err := e.Store.Do(ctx, p("k", "fp"), nil); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := replayed()
			r, err := e.Store.Replay(ctx, p("k", "fp"))
			if err != nil || r == nil || !r.Replayed || r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":"1"}` {
				t.Fatalf("a completed key, same fingerprint: %+v, %v; want the stored 201 replayed", r, err)
			}
			if n, early := replayed(); n != before+1 || early != 1 {
				t.Errorf("after the early replay: %d replayed events (%d early), want %d (1 early)", n, early, before+1)
			}
			if r, err := e.Store.Replay(ctx, p("k", "other")); r != nil || err != nil {
				t.Errorf("another fingerprint: %+v, %v; want nil, nil (Do refuses it)", r, err)
			}
			if r, err := e.Store.Replay(ctx, p("", "fp")); r != nil || err != nil {
				t.Errorf("an empty key: %+v, %v; want nil, nil", r, err)
			}
			// A key in flight: its handler holds it while Replay looks.
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
			r, err = e.Store.Replay(ctx, p("held", "fp"))
			close(release)
			if r != nil || err != nil {
				t.Errorf("a key in flight: %+v, %v; want nil, nil (Do answers in-progress)", r, err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if n, early := replayed(); n != before+1 || early != 1 {
				t.Errorf("lookups that found no replay reported %d replayed events (%d early), want %d (1)", n, early, before+1)
			}
		})
	}
}

// TestReplayCallerGone: a caller that left before the read gets its context's error, which is
// not counted as the store's (the edge then answers nothing and the request ends).
func TestReplayCallerGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Store.Replay(ctx, &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"})
	if err == nil || errors.Is(err, idem.ErrStoreUnavailable) {
		// A caller that left is its own error, not an outage.
		t.Errorf("a caller that left: %v; want its context's error, not ErrStoreUnavailable", err)
	}
}
