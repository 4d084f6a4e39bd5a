package idemhttp_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

// TestHandlerTimeoutEndsAWaitOnALock pins issue 11's bound on handler time: a handler blocked on
// a row lock the test holds is cancelled at the operation's timeout, on the server too (its
// session stops waiting for the lock), its work rolls back, the key is released while the lock
// is still held, and the client gets the 503 handler-timeout problem.
func TestHandlerTimeoutEndsAWaitOnALock(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []idem.EventKind
	e := newEnv(t, &idem.Config{Observer: func(_ context.Context, ev idem.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev.Kind)
	}}, nil)
	ctx := context.Background()
	var locked int64
	if err := e.Sch.Pool.QueryRow(ctx, "INSERT INTO payments (key, amount) VALUES ('locked', 1) RETURNING id").Scan(&locked); err != nil {
		t.Fatal(err)
	}
	locker, err := e.Sch.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	if _, err := locker.Exec(ctx, "SELECT FROM payments WHERE id = $1 FOR UPDATE", locked); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []string{"lease", "transaction", "no key"} {
		p := policy()
		p.Timeout = 300 * time.Millisecond
		req := request("k-"+mode, "fp")
		switch mode {
		case "transaction":
			p.Claim = idem.ClaimTransaction
		case "no key":
			p.Key.Required = false
			req.KeyValues = nil
		}
		var pid uint32
		blocked := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			pid = tx.Conn().PgConn().PID()
			_, err := tx.Exec(ctx, "UPDATE payments SET amount = amount + 1 WHERE id = $1", locked)
			return &idem.Outcome{Status: 200}, err
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := idemhttp.Serve(rctx, e.Store, p, req, blocked)
		cancel()
		if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeHandlerTimeout {
			t.Fatalf("%s: a handler blocked on a lock past its timeout = %+v, %v; want the handler-timeout problem", mode, r, err)
		}
		if w := written(t, r); w.Code != 503 || w.Header().Get("Retry-After") != "" {
			t.Errorf("%s: answered %d, Retry-After %q; want 503 without Retry-After", mode, w.Code, w.Header().Get("Retry-After"))
		}
		// The server gave up the lock wait too: the session ends (or at least stops waiting) while
		// the test still holds the lock.
		waitFor(t, 10*time.Second, mode+": the timed-out handler's session still waits for the lock on the server", func() bool {
			var waiting int
			err := e.Sch.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", int32(pid)).Scan(&waiting)
			return err == nil && waiting == 0
		})
		if mode == "no key" {
			continue
		}
		if n := e.Count("SELECT count(*) FROM "+e.Store.Table()+" WHERE key = $1", "k-"+mode); n != 0 {
			t.Errorf("%s: the key is still claimed after the timeout; want it released", mode)
		}
		// The key is free while the lock is still held: a retry that does not need the lock runs.
		r, err = idemhttp.Serve(ctx, e.Store, p, req, insertPayment(2))
		if err != nil || r.Kind != idemhttp.ResultExecuted {
			t.Errorf("%s: the retry while the lock is still held = %+v, %v; want executed", mode, r, err)
		}
	}
	var amount int
	if err := locker.QueryRow(ctx, "SELECT amount FROM payments WHERE id = $1", locked).Scan(&amount); err != nil || amount != 1 {
		t.Errorf("the locked payment's amount is %d, %v; want 1 (no timed-out update may commit)", amount, err)
	}
	mu.Lock()
	n := 0
	for _, k := range events {
		if k == idem.EventHandlerTimeout {
			n++
		}
	}
	mu.Unlock()
	if n != 2 {
		t.Errorf("%d handler_timeout events; want 2 (one per keyed request): %v", n, events)
	}
}

// TestTimeoutStopsRenewal: a handler that ignores its context keeps running past its timeout, but
// its lease is renewed no longer, so once the lease runs out a retry takes the key over, and the
// wedged handler's late answer commits nothing.
func TestTimeoutStopsRenewal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := policy()
	p.Lease = 600 * time.Millisecond // renewed every 200ms while the handler may run
	p.Timeout = 200 * time.Millisecond
	entered, unblock := make(chan struct{}), storetest.NewGate(t)
	first := make(chan *idemhttp.Result, 1)
	go func() {
		r, err := idemhttp.Serve(context.Background(), e.Store, p, request("wedged", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-unblock.C // ignores ctx
			return insertPayment(1)(context.WithoutCancel(ctx), tx)
		})
		if err != nil {
			t.Errorf("wedged request: %v", err)
		}
		first <- r
	}()
	storetest.Recv(t, entered, 10*time.Second, "the wedged request's handler never started")
	waitFor(t, 15*time.Second, "a retry never took over the key of a handler past its timeout: its lease is still being renewed", func() bool {
		r, err := idemhttp.Serve(context.Background(), e.Store, p, request("wedged", "fp"), insertPayment(2))
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		return r.Kind == idemhttp.ResultExecuted
	})
	unblock.Open()
	if r := storetest.Recv(t, first, 20*time.Second, "the wedged request never returned once let go"); r == nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeHandlerTimeout {
		t.Fatalf("the wedged request = %+v; want the handler-timeout problem", r)
	}
	if n := e.Count("SELECT count(*) FROM payments WHERE amount = 1"); n != 0 {
		t.Errorf("the wedged handler's payment committed; want it rolled back")
	}
	r, err := idemhttp.Serve(context.Background(), e.Store, p, request("wedged", "fp"), insertPayment(3))
	if err != nil || r.Kind != idemhttp.ResultReplayed {
		t.Errorf("after both = %+v, %v; want the takeover's answer replayed", r, err)
	}
}

// waitFor polls cond until it holds, failing with what when it does not within limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
