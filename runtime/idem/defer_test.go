package idem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

// inEachClaimMode runs test in both claim modes, in parallel, each on a store of its own whose
// events it counts, under a 30 s deadline.
func inEachClaimMode(t *testing.T, test func(t *testing.T, ctx context.Context, mode idem.ClaimMode, e *storetest.Env, events *eventLog)) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			events := &eventLog{kinds: map[idem.EventKind]int{}}
			e := newEnv(t, &idem.Config{Observer: events.observe}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			test(t, ctx, mode, e, events)
		})
	}
}

// errTaken is what the deferred insert's Refuse turns a unique violation into.
var errTaken = errors.New("that name is taken")

// TestDefer: writes a handler defers (idem.Defer) commit with the key's outcome, or not at all.
// In both claim modes:
//   - a run's deferred writes are sent after the handler returns, in the completion's batch, and
//     commit with its outcome; the replay runs nothing;
//   - a deferred write PostgreSQL refuses fails the request with its Refuse error: nothing of the
//     run is kept (neither the handler's own statements nor the writes deferred before it), the
//     key is given back and a retry runs anew; the event is a release, not a store error;
//   - a refused write without Refuse is a handler's failure: an HTTP server answers 500 internal,
//     naming no SQL;
//   - without a key the writes run at once, in the handler;
//   - a write deferred after the run ended is refused with ErrDeferAfterRun.
func TestDefer(t *testing.T) {
	inEachClaimMode(t, func(t *testing.T, ctx context.Context, mode idem.ClaimMode, e *storetest.Env, events *eventLog) {
		if _, err := e.Sch.Pool.Exec(ctx, `CREATE TABLE names (name text PRIMARY KEY, CHECK (name <> 'bad'));
				INSERT INTO names VALUES ('taken')`); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		// register inserts a payment itself, then defers two names: the first free, the
		// second the one asked for.
		register := func(first, name string) idem.HandlerFunc {
			return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				runs.Add(1)
				if _, err := tx.Exec(ctx, `INSERT INTO payments (key, amount) VALUES ('direct', 1)`); err != nil {
					return nil, err
				}
				err := idem.Defer(ctx, tx, idem.Write{SQL: `INSERT INTO names VALUES ($1)`, Args: []any{first}},
					idem.Write{SQL: `INSERT INTO names VALUES ($1)`, Args: []any{name}, Refuse: func(err *pgconn.PgError) error {
						if err.Code == "23505" {
							return errTaken
						}
						return nil
					}})
				if err != nil {
					return nil, err
				}
				// Not sent yet: nothing of the deferred writes is visible in the transaction.
				var seen int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM names WHERE name = $1`, first).Scan(&seen); err != nil {
					return nil, err
				}
				if seen != 0 {
					return nil, errors.New("a deferred write ran before the handler returned")
				}
				return &idem.Outcome{Status: 201, Body: []byte(`{"name":"` + name + `"}`)}, nil
			}
		}
		names := func() int { return e.Count(`SELECT count(*) FROM names`) }

		// Committed with the outcome; the replay runs nothing.
		p := &idem.DoParams{Scope: "s", Key: "ok", Operation: "register", Fingerprint: "fp", Claim: mode}
		res, err := e.Store.Do(ctx, p, register("ok-1", "ok-2"))
		if err != nil || res.Outcome.Status != 201 {
			t.Fatalf("Do = %+v, %v; want the handler's 201", res, err)
		}
		if n := names(); n != 3 {
			t.Fatalf("%d names after the run, want 3 (its two deferred writes committed)", n)
		}
		res, err = e.Store.Do(ctx, p, register("ok-1", "ok-2"))
		if err != nil || !res.Replayed || runs.Load() != 1 {
			t.Fatalf("second Do = %+v, %v after %d runs; want the replay of the one run", res, err, runs.Load())
		}

		// Refused: nothing kept, the key given back, the retry runs anew.
		p = &idem.DoParams{Scope: "s", Key: "refused", Operation: "register", Fingerprint: "fp", Claim: mode}
		beforeKeys, beforePayments := e.Keys(), e.Payments()
		released := events.count(idem.EventReleased)
		for try := 1; try <= 2; try++ {
			_, err = e.Store.Do(ctx, p, register("free", "taken"))
			if !errors.Is(err, errTaken) || idem.IsStoreUnavailable(err) {
				t.Fatalf("try %d: Do with a refused deferred write = %v; want the Refuse error", try, err)
			}
		}
		if runs.Load() != 3 {
			t.Errorf("%d runs, want 3: a refused key is given back and runs anew", runs.Load())
		}
		if n := names(); n != 3 {
			t.Errorf("%d names after the refused runs, want 3: the write deferred before the refused one was kept", n)
		}
		if n := e.Payments(); n != beforePayments {
			t.Errorf("%d payments after the refused runs, want %d: the handler's own insert was kept", n, beforePayments)
		}
		if n := e.Keys(); n != beforeKeys {
			t.Errorf("%d key rows after the refused runs, want %d: the key was not given back", n, beforeKeys)
		}
		if n := events.count(idem.EventReleased) - released; n != 2 {
			t.Errorf("%d released events for two refused runs, want 2", n)
		}
		if n := events.count(idem.EventStoreError); n != 0 {
			t.Errorf("%d store_error events: a refused write is the handler's failure, not an outage", n)
		}

		// Refused without Refuse: a handler's failure, answered 500 without SQL.
		p = &idem.DoParams{Scope: "s", Key: "bad", Operation: "register", Fingerprint: "fp", Claim: mode}
		_, err = e.Store.Do(ctx, p, register("bad", "fine"))
		if err == nil || idem.IsStoreUnavailable(err) {
			t.Fatalf("Do with a deferred write breaking a check = %v; want the handler's failure", err)
		}
		w := httptest.NewRecorder()
		idemhttp.ResponseErrorHandler(e.Store)(w, httptest.NewRequest(http.MethodPost, "/names", nil), err)
		if w.Code != http.StatusInternalServerError {
			t.Errorf("HTTP answer %d %s; want 500", w.Code, w.Body)
		}
		for _, leak := range []string{"23514", "SQLSTATE", "names", "check"} {
			if strings.Contains(w.Body.String(), leak) {
				t.Errorf("HTTP answer %s carries %q: no SQL or driver text may reach a client", w.Body, leak)
			}
		}
		if n := names(); n != 3 {
			t.Errorf("%d names, want 3", n)
		}

		// Without a key, the writes run in the handler.
		noKey := &idem.DoParams{Scope: "s", Operation: "register", Claim: mode, AllowNoKey: true}
		_, err = e.Store.Do(ctx, noKey, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			if err := idem.Defer(ctx, tx, idem.Write{SQL: `INSERT INTO names VALUES ('now')`}); err != nil {
				return nil, err
			}
			var seen int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM names WHERE name = 'now'`).Scan(&seen); err != nil || seen != 1 {
				return nil, errors.New("a write deferred without a key did not run at once")
			}
			return &idem.Outcome{Status: 200}, nil
		})
		if err != nil {
			t.Fatalf("Do without a key: %v", err)
		}
		// At once too, a refused write answers with its Refuse error.
		_, err = e.Store.Do(ctx, noKey, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			return &idem.Outcome{Status: 200}, idem.Defer(ctx, tx, idem.Write{SQL: `INSERT INTO names VALUES ('now')`,
				Refuse: func(*pgconn.PgError) error { return errTaken }})
		})
		if !errors.Is(err, errTaken) {
			t.Fatalf("Do without a key, its one write refused: %v; want the Refuse error", err)
		}

		// After the run: refused, not sent.
		var late chan error
		p = &idem.DoParams{Scope: "s", Key: "late", Operation: "register", Fingerprint: "fp", Claim: mode}
		_, err = e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			late = make(chan error, 1)
			go func() {
				time.Sleep(50 * time.Millisecond)
				late <- idem.Defer(ctx, tx, idem.Write{SQL: `INSERT INTO names VALUES ('late')`})
			}()
			return &idem.Outcome{Status: 201}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-late:
			if !errors.Is(err, idem.ErrDeferAfterRun) {
				t.Errorf("Defer after the run = %v; want ErrDeferAfterRun", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the late Defer never returned")
		}
		if n := e.Count(`SELECT count(*) FROM names WHERE name = 'late'`); n != 0 {
			t.Errorf("the write deferred after the run was kept")
		}
	})
}

// TestDeferFailuresAreTheHandlers: a deferred write that pgx cannot send (an argument it cannot
// encode, a statement PostgreSQL cannot prepare) is the handler's failure, blamed on that write
// alone: nothing was sent, so it is neither a store error nor a commit whose answer was lost, and
// another write's Refuse does not answer it.
func TestDeferFailuresAreTheHandlers(t *testing.T) {
	inEachClaimMode(t, func(t *testing.T, ctx context.Context, mode idem.ClaimMode, e *storetest.Env, events *eventLog) {
		refuseAll := func(*pgconn.PgError) error { return errTaken }
		for _, tc := range []struct {
			name string
			bad  idem.Write
		}{
			{"unencodable argument", idem.Write{SQL: "INSERT INTO payments (key, amount) VALUES ('x', $1)", Args: []any{make(chan int)}}},
			{"unpreparable statement", idem.Write{SQL: "INSERT INTO no_such_table VALUES (1)"}},
		} {
			p := &idem.DoParams{Scope: "s", Key: tc.name, Operation: "op", Fingerprint: "fp", Claim: mode}
			_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				err := idem.Defer(ctx, tx,
					idem.Write{SQL: "INSERT INTO payments (key, amount) VALUES ('first', 1)", Refuse: refuseAll},
					tc.bad)
				return &idem.Outcome{Status: 201}, err
			})
			switch {
			case err == nil:
				t.Fatalf("%s: Do succeeded; want the handler's failure", tc.name)
			case errors.Is(err, errTaken):
				t.Errorf("%s: %v: another write's Refuse answered it", tc.name, err)
			case idem.IsStoreUnavailable(err), errors.Is(err, idem.ErrCommitUnknown):
				t.Errorf("%s: %v: a write that was never sent is not the store's failure", tc.name, err)
			}
		}
		if n := events.count(idem.EventStoreError); n != 0 {
			t.Errorf("%d store_error events, want 0", n)
		}
		if n := e.Payments(); n != 0 {
			t.Errorf("%d payments kept, want 0", n)
		}
		if n := e.Keys(); n != 0 {
			t.Errorf("%d key rows, want 0: the keys were not given back", n)
		}
	})
}

// TestPanicAfterCommitKeepsTheOutcome: an observer that panics on the completed event runs
// after the work and its outcome committed. The panic goes on, but nothing is given back: the
// key stays complete and replays, and no released event follows its completed one.
func TestPanicAfterCommitKeepsTheOutcome(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			events := &eventLog{kinds: map[idem.EventKind]int{}}
			var panicked atomic.Bool
			observe := func(ctx context.Context, ev idem.Event) {
				events.observe(ctx, ev)
				if ev.Kind == idem.EventCompleted && panicked.CompareAndSwap(false, true) {
					panic("observer bug")
				}
			}
			e := newEnv(t, &idem.Config{Observer: observe}, &idemtest.SchemaOpts{MaxConns: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: mode}
			func() {
				defer func() {
					if r := recover(); r == nil {
						t.Fatal("the observer's panic did not reach the caller")
					}
				}()
				_, _ = e.Store.Do(ctx, p, pay(1, "done"))
			}()
			if n := events.count(idem.EventReleased); n != 0 {
				t.Errorf("%d released events after a completion that committed, want 0", n)
			}
			r, err := e.Store.Do(ctx, p, pay(1, "again"))
			if err != nil || !r.Replayed || string(r.Outcome.Body) != "done" {
				t.Fatalf("Do after the panic = %+v, %v; want the replay of the committed outcome", r, err)
			}
			if n := e.Payments(); n != 1 {
				t.Errorf("%d payments, want 1", n)
			}
		})
	}
}
