package idemconsume_test

import (
	"context"
	"errors"
	"log/slog"
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

	// The message's history is the key's, as for any Do.
	h, err := e.c.Store().History(ctx, "", "test:orders", "m1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range h {
		kinds = append(kinds, string(ev.Kind))
	}
	if len(h) == 0 {
		t.Fatal("no history for m1 with Options.History set")
	}
	t.Logf("history of m1: %v", kinds)
}

// TestConcurrentDeliveries: 8 deliveries of one message at once (a redelivery while the first
// still runs, several consumers) run the handler once; the others are told to redeliver later
// (in_progress) or, once it committed, to acknowledge without running.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, &idemconsume.Options{Claim: mode})
			const n = 8
			release := make(chan struct{})
			var wg sync.WaitGroup
			results := make([]idemconsume.Result, n)
			for i := range n {
				wg.Go(func() {
					results[i] = e.c.Process(context.Background(), msg("m", "p"), func(ctx context.Context, tx pgx.Tx) error {
						<-release // hold the message while the other deliveries arrive
						return write("m", "p")(ctx, tx)
					})
				})
			}
			time.Sleep(200 * time.Millisecond) // let the deliveries reach the store; not an assertion
			close(release)
			wg.Wait()
			ran, other := 0, map[string]int{}
			for _, r := range results {
				switch {
				case r.Ran:
					ran++
				case r.Action == idemconsume.Ack && r.Duplicate:
					other["duplicate"]++
				case r.Action == idemconsume.Redeliver && r.Reason == idemconsume.ReasonInProgress:
					other["in_progress"]++
					if r.RetryAfter <= 0 {
						t.Errorf("in_progress without a RetryAfter: %+v", r)
					}
				default:
					t.Errorf("unexpected result %+v", r)
				}
			}
			if ran != 1 || e.effects(t, "m") != 1 {
				t.Fatalf("handler ran %d times, %d rows; want 1 and 1 (others: %v)", ran, e.effects(t, "m"), other)
			}
			t.Logf("%d deliveries at once: 1 ran, %v", n, other)
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
