package idemhttp_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// terminate ends the server session pid (pg_terminate_backend, what a restarting server or a
// failover does to its sessions) and waits until it is gone.
func terminate(t testing.TB, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid)); err != nil {
		t.Fatal(err)
	}
	for {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatalf("session %d did not end within 10s: %v", pid, err)
		}
		if n == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// commitKiller terminates the session a COMMIT is about to be sent on, once armed.
type commitKiller struct {
	t     testing.TB
	armed atomic.Bool
}

func (k *commitKiller) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "commit") && k.armed.CompareAndSwap(true, false) {
		terminate(k.t, c.PgConn().PID())
	}
	return ctx
}
func (k *commitKiller) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart does the same for a batch that commits: the runtime sends the completion and
// the COMMIT together.
func (k *commitKiller) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	// A lease-mode claim's batch commits the claim and then begins: that commit is not the one.
	if slices.ContainsFunc(d.Batch.QueuedQueries, func(q *pgx.QueuedQuery) bool { return strings.HasPrefix(q.SQL, "begin") }) {
		return ctx
	}
	for _, q := range d.Batch.QueuedQueries {
		if strings.HasPrefix(q.SQL, "commit") && k.armed.CompareAndSwap(true, false) {
			terminate(k.t, c.PgConn().PID())
		}
	}
	return ctx
}
func (k *commitKiller) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (k *commitKiller) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestConnectionLostDuringTheHandlerIs503 pins issue 9's third item: a database connection lost
// inside the business transaction (SQLSTATE 57P01 from pg_terminate_backend, under the handler's
// own statement, the complete or the commit) is answered 503 store-unavailable, as a store outage,
// not as the handler's error (a 500); the key is released, and a retry executes.
func TestConnectionLostDuringTheHandlerIs503(t *testing.T) {
	t.Parallel()
	killer := &commitKiller{t: t}
	e := newEnv(t, &idem.Config{UnavailableRetryAfter: 2 * time.Second}, &idemtest.SchemaOpts{Tracer: killer})
	ctx := context.Background()
	pid := func(tx pgx.Tx) uint32 { return tx.Conn().PgConn().PID() }
	for _, c := range []struct {
		name string
		fn   idem.HandlerFunc
	}{
		{"the handler's own statement", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			terminate(t, pid(tx))
			return insertPayment(1)(ctx, tx)
		}},
		{"the complete", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			out, err := insertPayment(1)(ctx, tx)
			terminate(t, pid(tx))
			return out, err
		}},
		{"the commit", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			killer.armed.Store(true)
			return insertPayment(1)(ctx, tx)
		}},
	} {
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			p := policy()
			p.Claim = mode
			key := c.name + " " + mode.String()
			r, err := idemhttp.Serve(ctx, e.Store, p, request(key, "fp"), c.fn)
			if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeStoreUnavailable {
				t.Errorf("%s lost (%s): Serve = %+v, %v; want the 503 store-unavailable problem", c.name, mode, r, err)
				continue
			}
			if w := written(t, r); w.Code != 503 || w.Header().Get("Retry-After") != "2" {
				t.Errorf("%s lost (%s): answered %d, Retry-After %q; want 503 with Config.UnavailableRetryAfter", c.name, mode, w.Code, w.Header().Get("Retry-After"))
			}
			if n := e.Count("SELECT count(*) FROM "+e.Store.Table()+" WHERE key = $1", key); n != 0 {
				t.Errorf("%s lost (%s): the key row is still there; want it released", c.name, mode)
			}
			if r, err := idemhttp.Serve(ctx, e.Store, p, request(key, "fp"), insertPayment(2)); err != nil || r.Kind != idemhttp.ResultExecuted {
				t.Errorf("%s lost (%s): the retry = %+v, %v; want executed", c.name, mode, r, err)
			}
		}
	}
	if n := e.Count("SELECT count(*) FROM payments WHERE amount = 1"); n != 0 {
		t.Errorf("%d payments of the failed requests survived; want none", n)
	}

	// Do says the same: ErrStoreUnavailable, still wrapping the handler's error.
	var handlerErr error
	_, err := e.Store.Do(ctx, &idem.DoParams{Key: "do", Operation: "op", Fingerprint: "fp"}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		terminate(t, pid(tx))
		_, handlerErr = tx.Exec(ctx, "SELECT 1")
		return nil, handlerErr
	})
	if !errors.Is(err, idem.ErrStoreUnavailable) || handlerErr == nil || !errors.Is(err, handlerErr) {
		t.Fatalf("Do with the connection lost under fn = %v; want ErrStoreUnavailable wrapping fn's error %v", err, handlerErr)
	}
	// An error of the handler's own that is not about the store stays the handler's.
	boom := errors.New("card declined")
	if _, err := e.Store.Do(ctx, &idem.DoParams{Key: "do2", Operation: "op", Fingerprint: "fp"}, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		return nil, boom
	}); err != boom {
		t.Fatalf("Do with fn's own error = %v; want it as it is", err)
	}
}
