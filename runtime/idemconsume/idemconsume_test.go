package idemconsume_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

type env struct {
	sch *idemtest.Schema
	c   *idemconsume.Consumer
}

func newEnv(t *testing.T, opts *idemconsume.Options) *env {
	t.Helper()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 12})
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE effects (msg_id text NOT NULL, payload text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return &env{sch: sch, c: idemconsume.New(store, opts)}
}

// write is a handler whose effect is one row; effects has no unique constraint, so a second
// run would show as a second row.
func write(id, payload string) idemconsume.Handler {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (msg_id, payload) VALUES ($1, $2)`, id, payload)
		return err
	}
}

func msg(id, payload string) *idemconsume.Message {
	return &idemconsume.Message{Source: "test:orders", ID: id, Fingerprint: idemconsume.Fingerprint([]byte(payload))}
}

func (e *env) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := e.sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE msg_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeliveries: each kind of delivery gets its action, and the effect is written once.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &idemconsume.Options{Operation: "orders", History: true})
	ctx := context.Background()

	failing := func(ctx context.Context, tx pgx.Tx) error {
		if err := write("m1", "a")(ctx, tx); err != nil {
			return err
		}
		return errors.New("downstream said no")
	}
	r := e.c.Process(ctx, msg("m1", "a"), failing)
	if r.Action != idemconsume.Redeliver || r.Reason != idemconsume.ReasonHandlerFailed || r.Ran {
		t.Fatalf("failed handler: %+v; want redeliver, handler_failed", r)
	}
	if n := e.effects(t, "m1"); n != 0 {
		t.Fatalf("a failed handler left %d rows; want its work rolled back", n)
	}

	r = e.c.Process(ctx, msg("m1", "a"), write("m1", "a"))
	if r.Action != idemconsume.Ack || !r.Ran || r.Duplicate {
		t.Fatalf("redelivery after a failure: %+v; want ack, ran", r)
	}
	ran := false
	r = e.c.Process(ctx, msg("m1", "a"), func(context.Context, pgx.Tx) error { ran = true; return nil })
	if r.Action != idemconsume.Ack || !r.Duplicate || r.Ran || ran {
		t.Fatalf("redelivery of a done message: %+v (handler ran: %v); want ack, duplicate, handler not run", r, ran)
	}
	r = e.c.Process(ctx, msg("m1", "b"), write("m1", "b"))
	if r.Action != idemconsume.DeadLetter || r.Reason != idemconsume.ReasonKeyReused || r.Err == nil {
		t.Fatalf("id reused with another payload: %+v; want dead_letter, key_reused", r)
	}
	if n := e.effects(t, "m1"); n != 1 {
		t.Fatalf("%d rows for m1; want 1", n)
	}

	r = e.c.Process(ctx, msg("", "x"), write("", "x"))
	if r.Action != idemconsume.DeadLetter || r.Reason != idemconsume.ReasonNoMessageID {
		t.Fatalf("message without an id: %+v; want dead_letter, no_message_id", r)
	}
	r = e.c.Process(ctx, msg("m2", "x"), func(ctx context.Context, tx pgx.Tx) error {
		if err := write("m2", "x")(ctx, tx); err != nil {
			return err
		}
		return idemconsume.Reject(errors.New("payload is not an order"))
	})
	if r.Action != idemconsume.DeadLetter || r.Reason != idemconsume.ReasonRejected {
		t.Fatalf("rejected message: %+v; want dead_letter, rejected", r)
	}
	if n := e.effects(t, "m2"); n != 0 {
		t.Fatalf("a rejected message left %d rows; want its work rolled back", n)
	}

	// The message's history is the key's, as for any Do (the refused reuse is counted in memory,
	// like replays, and written at the store's next flush: Close flushes).
	e.c.Store().Close()
	h, err := e.c.Store().History(ctx, "", "test:orders", "m1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range h {
		kinds = append(kinds, string(ev.Kind))
	}
	if got := strings.Join(kinds, " "); !strings.Contains(got, "completed") || !strings.Contains(got, "key_reused") {
		t.Fatalf("history of m1: %s; want its completion and the reused id in it", got)
	}
	t.Logf("history of m1: %v", kinds)
}

// TestConcurrentDeliveries: while one delivery of a message runs its handler, 7 more arrive at
// once (a redelivery after the ack deadline, other consumers): none runs the handler. In lease
// mode they are told at once to redeliver later (in_progress); in transaction mode they wait for
// the holder's commit and are acknowledged as duplicates.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, &idemconsume.Options{Claim: mode})
			const others = 7
			running, release := make(chan struct{}), make(chan struct{})
			first := make(chan idemconsume.Result, 1)
			go func() {
				first <- e.c.Process(context.Background(), msg("m", "p"), func(ctx context.Context, tx pgx.Tx) error {
					close(running)
					<-release
					return write("m", "p")(ctx, tx)
				})
			}()
			select {
			case <-running:
			case <-time.After(10 * time.Second):
				t.Fatal("the first delivery's handler did not start within 10s")
			}
			var wg sync.WaitGroup
			var ranMu sync.Mutex
			ran := 0
			results := make(chan idemconsume.Result, others)
			for range others {
				wg.Go(func() {
					results <- e.c.Process(context.Background(), msg("m", "p"), func(context.Context, pgx.Tx) error {
						ranMu.Lock()
						ran++
						ranMu.Unlock()
						return nil
					})
				})
			}
			if mode == idem.ClaimLease {
				for range others {
					select {
					case r := <-results:
						if r.Action != idemconsume.Redeliver || r.Reason != idemconsume.ReasonInProgress || r.RetryAfter <= 0 {
							t.Errorf("a delivery while the first runs: %+v; want redeliver, in_progress, a RetryAfter", r)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("a delivery while the first runs got no answer within 10s")
					}
				}
			} else {
				// They wait for the holder's transaction (on its lock, or for its notification and
				// a claim again): give them time to arrive. Not an assertion: one that arrives
				// after the commit is a duplicate as well.
				time.Sleep(300 * time.Millisecond)
			}
			close(release)
			select {
			case r := <-first:
				if r.Action != idemconsume.Ack || !r.Ran {
					t.Fatalf("first delivery: %+v; want ack, ran", r)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the first delivery did not finish within 10s of its release")
			}
			wg.Wait()
			close(results)
			for r := range results { // transaction mode: the waiters, answered after the commit
				if r.Action != idemconsume.Ack || !r.Duplicate {
					t.Errorf("a delivery that waited for the first: %+v; want ack, duplicate", r)
				}
			}
			if r := e.c.Process(context.Background(), msg("m", "p"), write("m", "p")); r.Action != idemconsume.Ack || !r.Duplicate {
				t.Errorf("a delivery after the first committed: %+v; want ack, duplicate", r)
			}
			if ran != 0 || e.effects(t, "m") != 1 {
				t.Fatalf("the other deliveries ran the handler %d times; %d rows; want 0 and 1", ran, e.effects(t, "m"))
			}
		})
	}
}

// TestStoreUnavailable: without the store no handler runs and the message is redelivered
// later.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, err := idem.NewStore(pool, &idem.Config{Schema: sch.Name, StoreTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ran := false
	r := idemconsume.New(store, nil).Process(context.Background(), msg("m", "p"), func(context.Context, pgx.Tx) error { ran = true; return nil })
	if r.Action != idemconsume.Redeliver || r.Reason != idemconsume.ReasonStoreUnavailable || r.RetryAfter <= 0 || ran {
		t.Fatalf("store down: %+v (handler ran: %v); want redeliver, store_unavailable, a RetryAfter, no run", r, ran)
	}
}

func TestFingerprint(t *testing.T) {
	if idemconsume.Fingerprint([]byte("a")) != idemconsume.Fingerprint([]byte("a")) {
		t.Fatal("equal payloads, different fingerprints")
	}
	if idemconsume.Fingerprint([]byte("a")) == idemconsume.Fingerprint([]byte("b")) {
		t.Fatal("different payloads, one fingerprint")
	}
}
