package idem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

// pay is a Do function that inserts one payment with amount and answers body.
func pay(amount int, body string) func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, $2)", c.Key, amount); err != nil {
			return nil, err
		}
		return &idem.Outcome{Status: 201, Body: []byte(body)}, nil
	}
}

func TestFencingSlowHolderCannotCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	// The slow first holder finishes after its successor has committed, or while the successor
	// is still running: either way only the successor's work may survive.
	for _, firstFinishes := range []string{"after the takeover commits", "while the takeover runs"} {
		t.Run(firstFinishes, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil, nil)
			idem.DisableRenewal(e.Store) // let the first holder's lease run out while it works
			// The timeout lets the handler outlive its lease (by default the timeout is the lease).
			p := &idem.DoParams{Scope: "s", Key: "fenced", Operation: "capture", Fingerprint: "fp", Lease: time.Second, Timeout: time.Minute}

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Opened by the test, or at its end at the latest: a failure never leaves the first
			// holder blocked with a pool connection.
			inserted, releaseFirst := make(chan struct{}), storetest.NewGate(t)
			firstErr := make(chan error, 1)
			go func() {
				_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					out, err := pay(1, "first")(ctx, tx)
					close(inserted)
					<-releaseFirst.C // outlive the lease
					return out, err
				})
				firstErr <- err
			}()
			storetest.Recv(t, inserted, 10*time.Second, "the first holder's handler never inserted")

			if r, err := e.Store.Do(ctx, p, pay(2, "second")); !errors.Is(err, idem.ErrInProgress) {
				t.Fatalf("duplicate within the lease = %+v, %v; want ErrInProgress", r, err)
			}
			time.Sleep(1100 * time.Millisecond)
			var attempt int
			second := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				c, _ := idem.ClaimFromContext(ctx)
				attempt = c.Attempt
				if firstFinishes == "while the takeover runs" {
					releaseFirst.Open()
					select {
					case err := <-firstErr:
						if !errors.Is(err, idem.ErrLeaseLost) {
							t.Errorf("first holder's completion = %v; want ErrLeaseLost", err)
						}
					case <-time.After(20 * time.Second):
						t.Errorf("the first holder never returned once let go")
					}
				}
				return pay(2, "second")(ctx, tx)
			}
			r, err := e.Store.Do(ctx, p, second)
			if err != nil || r.Replayed || string(r.Outcome.Body) != "second" || attempt != 2 {
				t.Fatalf("request after the lease ran out = %+v, %v (attempt %d); want a takeover that executes", r, err, attempt)
			}
			if firstFinishes == "after the takeover commits" {
				releaseFirst.Open()
				if err := storetest.Recv(t, firstErr, 20*time.Second, "the first holder never returned once let go"); !errors.Is(err, idem.ErrLeaseLost) {
					t.Fatalf("first holder's completion = %v; want ErrLeaseLost", err)
				}
			}
			if n := e.Payments(); n != 1 {
				t.Fatalf("%d payments; want exactly one (the first holder's must roll back)", n)
			}
			if n := e.Count("SELECT count(*) FROM payments WHERE amount = 2"); n != 1 {
				t.Fatalf("the surviving payment is not the second request's")
			}
			r, err = e.Store.Do(context.Background(), p, pay(3, "third"))
			if err != nil || !r.Replayed || string(r.Outcome.Body) != "second" {
				t.Fatalf("replay = %+v, %v; want the second request's outcome", r, err)
			}
		})
	}
}

func TestRenewalKeepsALongHandlerOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	// A handler allowed to run longer than its lease (the default timeout is the lease).
	p := &idem.DoParams{Scope: "s", Key: "long", Operation: "export", Fingerprint: "fp", Lease: time.Second, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(started)
			time.Sleep(2500 * time.Millisecond) // 2.5 leases
			return pay(1, "done")(ctx, tx)
		})
		firstErr <- err
	}()
	storetest.Recv(t, started, 10*time.Second, "the long handler never started")
	time.Sleep(1600 * time.Millisecond) // past the first lease: only renewal keeps the key
	if _, err := e.Store.Do(ctx, p, pay(2, "dup")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("duplicate after one lease = %v; want ErrInProgress (the holder renews)", err)
	}
	if err := storetest.Recv(t, firstErr, 20*time.Second, "the long handler never returned"); err != nil {
		t.Fatalf("long handler: %v", err)
	}
	if n := e.Payments(); n != 1 {
		t.Fatalf("%d payments; want 1", n)
	}
}

func TestAbandonedClaimIsTakenOverAfterItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	scope := "0:" // the scope idemhttp.Serve renders for no tenant and no scope parts
	// A crash: claimed, never completed nor released.
	cr, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: scope, Key: "crash", Operation: "op", Fingerprint: "fp", Lease: time.Second})
	if err != nil || cr.Status != idem.ClaimAcquired {
		t.Fatalf("claim = %+v, %v", cr, err)
	}
	p := &idem.DoParams{Scope: scope, Key: "crash", Operation: "op", Fingerprint: "fp", Lease: time.Second}
	_, err = e.Store.Do(ctx, p, pay(1, "x"))
	var inProgress *idem.InProgressError
	if !errors.Is(err, idem.ErrInProgress) || !errors.As(err, &inProgress) || inProgress.RetryAfter != time.Second {
		t.Fatalf("during the dead holder's lease = %v; want ErrInProgress, retry after 1s", err)
	}
	r, err := idemhttp.Serve(ctx, e.Store, policy(), &idemhttp.Request{KeyValues: []string{"crash"}, Fingerprint: "fp"}, insertPayment(1))
	if err != nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeInProgress || r.Problem.RetryAfter != time.Second {
		t.Fatalf("Serve during the lease = %+v, %v", r, err)
	}
	time.Sleep(1100 * time.Millisecond)
	// A different request may not inherit the dead holder's key, lease or not.
	other := *p
	other.Fingerprint = "other"
	if _, err := e.Store.Do(ctx, &other, pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("different request after the lease = %v; want ErrFingerprintMismatch", err)
	}
	res, err := e.Store.Do(ctx, p, pay(1, "after"))
	if err != nil || res.Replayed || string(res.Outcome.Body) != "after" {
		t.Fatalf("after the lease = %+v, %v; want executed", res, err)
	}
	// The dead holder's token no longer fences anything.
	tx, _ := e.Sch.Pool.Begin(ctx)
	defer tx.Rollback(ctx)
	if err := e.Store.CompleteTx(ctx, tx, cr.Claim, &idem.Outcome{Status: 200}, time.Hour); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("dead holder completes = %v; want ErrLeaseLost", err)
	}
	if err := e.Store.Renew(ctx, cr.Claim, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("dead holder renews = %v; want ErrLeaseLost", err)
	}
	if err := e.Store.Release(ctx, cr.Claim); err != nil || e.Keys() != 1 {
		t.Fatalf("dead holder's release = %v and left %d rows; want the new owner's row kept", err, e.Keys())
	}
	if n := e.Payments(); n != 1 {
		t.Fatalf("%d payments; want 1", n)
	}
}

func TestExpiredKeyExecutesAnew(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	p := &idem.DoParams{Scope: "s", Key: "short", Operation: "op", Fingerprint: "fp", TTL: 300 * time.Millisecond,
		Timeout: 100 * time.Millisecond} // the key is remembered up to TTL + Timeout
	if r, err := e.Store.Do(ctx, p, pay(1, "one")); err != nil || r.Replayed {
		t.Fatalf("first = %+v, %v", r, err)
	}
	if r, err := e.Store.Do(ctx, p, pay(1, "two")); err != nil || !r.Replayed {
		t.Fatalf("within the TTL = %+v, %v; want a replay", r, err)
	}
	time.Sleep(600 * time.Millisecond) // past TTL + Timeout
	other := *p
	other.Fingerprint = "another request entirely" // an expired key is a new key
	var attempt int
	r, err := e.Store.Do(ctx, &other, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		attempt = c.Attempt
		return pay(2, "three")(ctx, tx)
	})
	if err != nil || r.Replayed || string(r.Outcome.Body) != "three" || attempt != 1 {
		t.Fatalf("after the TTL = %+v, %v (attempt %d); want a fresh execution", r, err, attempt)
	}
	if n := e.Payments(); n != 2 {
		t.Fatalf("%d payments; want 2", n)
	}
}

func TestDoErrorsAndTransactionMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	boom := errors.New("downstream refused")
	p := &idem.DoParams{Scope: "queue", Key: "msg-1", Operation: "consume", Fingerprint: "fp"}
	if _, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		pay(1, "")(ctx, tx)
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Do = %v; want fn's error", err)
	}
	if e.Keys() != 0 || e.Payments() != 0 {
		t.Fatalf("after an error: %d keys, %d payments; want 0 and 0", e.Keys(), e.Payments())
	}
	// Side effects only: a nil outcome is fine.
	if r, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		_, err := pay(1, "")(ctx, tx)
		return nil, err
	}); err != nil || r.Replayed {
		t.Fatalf("retry = %+v, %v", r, err)
	}
	mismatch := *p
	mismatch.Fingerprint = "other"
	if _, err := e.Store.Do(ctx, &mismatch, pay(1, "")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("other fingerprint = %v; want ErrFingerprintMismatch", err)
	}
	tp := &idem.DoParams{Scope: "queue", Key: "msg-2", Operation: "consume", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	for i, want := range []bool{false, true} {
		r, err := e.Store.Do(ctx, tp, pay(1, "tx"))
		if err != nil || r.Replayed != want || string(r.Outcome.Body) != "tx" {
			t.Fatalf("transaction-mode call %d = %+v, %v; want replayed=%v", i, r, err, want)
		}
	}
	if n := e.Payments(); n != 2 {
		t.Fatalf("%d payments; want 2", n)
	}
	if _, err := e.Store.Do(ctx, &idem.DoParams{}, pay(1, "")); err == nil {
		t.Fatal("Do without a key did not fail")
	}
}

func TestStoreUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	// A socket directory with no server behind it: connection refused.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("idem-no-server-%d", time.Now().UnixNano()))
	down, err := pgxpool.New(context.Background(), "postgres://postgres@/postgres?sslmode=disable&connect_timeout=2&host="+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	// A pool that was closed under the store (a shutdown racing a request).
	sch := idemtest.TestSchema(t, nil)
	closed, err := pgxpool.New(context.Background(), sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()

	for name, db := range map[string]*pgxpool.Pool{"unreachable": down, "closed pool": closed} {
		s, err := idem.NewStore(db, &idem.Config{UnavailableRetryAfter: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			ran = true
			return &idem.Outcome{Status: 200}, nil
		}
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			p := policy()
			p.Claim = mode
			r, err := idemhttp.Serve(context.Background(), s, p, request("k", "fp"), fn)
			if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeStoreUnavailable || ran {
				t.Fatalf("%s, mode %d: Serve = %+v, %v (ran %v); want 503 store-unavailable without running", name, mode, r, err, ran)
			}
			w := written(t, r)
			if w.Code != 503 || w.Header().Get("Retry-After") != "3" || w.Header().Get("Cache-Control") != "no-store" {
				t.Fatalf("%s: answer %d %v", name, w.Code, w.Header())
			}
		}
		if _, err := s.Do(context.Background(), &idem.DoParams{Key: "k"}, fn); !errors.Is(err, idem.ErrStoreUnavailable) || ran {
			t.Fatalf("%s: Do = %v (ran %v); want ErrStoreUnavailable", name, err, ran)
		}
		if _, err := s.Claim(context.Background(), &idem.ClaimParams{Key: "k"}); !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Fatalf("%s: Claim = %v; want ErrStoreUnavailable", name, err)
		}
	}
}

func TestSlowStoreFailsClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &idem.Config{StoreTimeout: 300 * time.Millisecond}, nil)
	ctx := context.Background()
	// A migration (or anything else) holding the key table: the claim cannot proceed.
	blocker, err := e.Sch.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "LOCK TABLE "+e.Store.Table()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	ran := false
	// Without the StoreTimeout, this request would wait for the lock until its own deadline and
	// end with that context's error instead of a store-unavailable problem: the answer, not the
	// time taken, shows which bound fired.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := idemhttp.Serve(ctx, e.Store, policy(), request("k", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		ran = true
		return &idem.Outcome{Status: 200}, nil
	})
	if err != nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeStoreUnavailable || ran {
		t.Fatalf("Serve against a blocked store = %+v, %v (ran %v); want 503 store-unavailable", r, err, ran)
	}
	if _, err := e.Store.Do(ctx, &idem.DoParams{Key: "k"}, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		ran = true
		return nil, nil
	}); !errors.Is(err, idem.ErrStoreUnavailable) || ran {
		t.Fatalf("Do against a blocked store = %v (ran %v); want ErrStoreUnavailable", err, ran)
	}
}

// queryCounter counts statements and batches sent to the server: each is one round trip
// (prepared statements are cached per connection after their first use).
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func TestRoundTripsPerRequest(t *testing.T) {
	t.Parallel()
	counter := &queryCounter{}
	// Four connections: a pool of fewer owes no rollback (owed.go), and the requests run one
	// after another, so each finds the connection the one before it left.
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4, Tracer: counter})
	pool := sch.Pool
	s, _ := idem.NewStore(pool, sch.Config())
	t.Cleanup(s.Close) // its owed rollbacks, before the pool closes
	idem.KeepOwedRollbacks(s)
	if _, err := pool.Exec(context.Background(), "CREATE TABLE payments (key text, amount int)"); err != nil {
		t.Fatal(err)
	}
	business := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		_, err := tx.Exec(ctx, "INSERT INTO payments VALUES ($1, 1)", c.Key)
		return &idem.Outcome{Status: 201, Body: []byte(`{}`)}, err
	}
	// deferred is business with its insert deferred (idem.Defer): it travels with the outcome.
	deferred := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		err := idem.Defer(ctx, tx, idem.Write{SQL: "INSERT INTO payments VALUES ($1, 2)", Args: []any{c.Key}})
		return &idem.Outcome{Status: 201, Body: []byte(`{}`)}, err
	}
	lease, txMode := policy(), policy()
	txMode.Claim = idem.ClaimTransaction
	measureWith := func(fn idem.HandlerFunc, p *idemhttp.Policy, key, fingerprint string) (int64, string) {
		before := counter.n.Load()
		r, err := idemhttp.Serve(context.Background(), s, p, request(key, fingerprint), fn)
		if err != nil {
			t.Fatal(err)
		}
		return counter.n.Load() - before, kindName(r)
	}
	measure := func(p *idemhttp.Policy, key, fingerprint string) (int64, string) {
		return measureWith(business, p, key, fingerprint)
	}
	measure(lease, "warm-1", "fp") // prepare and cache every statement on the one connection
	measure(lease, "warm-1", "fp")
	measure(txMode, "warm-2", "fp")
	measure(txMode, "warm-2", "fp")
	measureWith(deferred, lease, "warm-3", "fp")
	measureWith(deferred, txMode, "warm-4", "fp")
	// The last replay's connection waits for its rollback (owed.go): it is made now, so that the
	// queries below run on the one connection the requests use.
	idem.SettleOwedRollbacks(s)
	conns := pool.Stat().NewConnsCount()
	// pgx forgets the statements of a batch that failed, and prepares them anew on the next
	// request; the guards fail on purpose in every replay, so the Store's statements must not be
	// among those forgotten.
	const prepared = "SELECT coalesce(max(prepare_time), 'epoch') FROM pg_prepared_statements"
	var warm time.Time
	if err := pool.QueryRow(context.Background(), prepared).Scan(&warm); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		fn     idem.HandlerFunc
		p      *idemhttp.Policy
		key    string
		fp     string
		kind   string
		trips  int64
		reason string
	}{
		{"lease: claim+complete", business, lease, "k1", "fp", "executed", 3, "claim+commit+begin batch, business insert, complete+commit batch"},
		{"lease: replay", business, lease, "k1", "fp", "replayed", 1, "claim"},
		{"lease: mismatch", business, lease, "k1", "other", "problem key-reused", 1, "claim"},
		{"transaction: claim+complete", business, txMode, "k2", "fp", "executed", 3, "begin+claim batch, business insert, complete+commit batch"},
		{"transaction: replay", business, txMode, "k2", "fp", "replayed", 1, "replay check batch, begin skipped"},
		{"transaction: mismatch", business, txMode, "k2", "other", "problem key-reused", 1, "replay check batch, begin skipped"},
		{"lease: claim+deferred write+complete", deferred, lease, "k3", "fp", "executed", 2, "claim+commit+begin batch, deferred insert+complete+commit batch"},
		{"transaction: claim+deferred write+complete", deferred, txMode, "k4", "fp", "executed", 2, "begin+claim batch, deferred insert+complete+commit batch"},
	} {
		trips, kind := measureWith(tc.fn, tc.p, tc.key, tc.fp)
		if kind != tc.kind || trips != tc.trips {
			t.Errorf("%s: %s in %d round trips; want %s in %d (%s)", tc.name, kind, trips, tc.kind, tc.trips, tc.reason)
		} else {
			t.Logf("%s: %d round trips (%s)", tc.name, trips, tc.reason)
		}
	}
	idem.SettleOwedRollbacks(s)
	var last time.Time
	if err := pool.QueryRow(context.Background(), prepared).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last.After(warm) {
		t.Errorf("statements were prepared again during the requests (last at %v, after warm-up at %v): a failed batch made pgx forget the Store's statements", last, warm)
	}
	// A connection left in a transaction would have been closed by the pool and replaced.
	if n := pool.Stat().NewConnsCount(); n != conns {
		t.Errorf("the pool opened %d connections during the requests; want 0: a request left its connection in a transaction", n-conns)
	}
}

// A transaction-mode replay check that misses a key completed between the check and its guard
// (which then skips the begin) claims again and replays: the key's outcome, never an error or a
// second execution, and no connection is left behind.
func TestTransactionReplayCheckRace(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 1})
	s, _ := idem.NewStore(sch.Pool, sch.Config())
	p := &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	runs := 0
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		runs++
		return &idem.Outcome{Status: 201, Body: []byte(`{"id":1}`)}, nil
	}
	if _, err := s.Do(context.Background(), p, fn); err != nil {
		t.Fatal(err)
	}
	idem.BlindReplayCheck(s)
	for i := range 3 { // more than the pool's one connection: a leak would block the next try
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := s.Do(ctx, p, fn)
		cancel()
		if err != nil {
			t.Fatalf("replay %d: %v; want the stored outcome", i, err)
		}
		if !r.Replayed || r.Outcome.Status != 201 || string(r.Outcome.Body) != `{"id":1}` {
			t.Fatalf("replay %d: replayed %v, %d %s; want the stored 201 {\"id\":1}", i, r.Replayed, r.Outcome.Status, r.Outcome.Body)
		}
	}
	if runs != 1 {
		t.Fatalf("the handler ran %d times; want once", runs)
	}
	other := *p
	other.Fingerprint = "other"
	if _, err := s.Do(context.Background(), &other, fn); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request with the key: %v; want ErrKeyReused", err)
	}
}

func TestLogsAndEventsNeverCarryTheRawKey(t *testing.T) {
	t.Parallel()
	var buf lockedBuffer
	var events []idem.Event
	e := newEnv(t, &idem.Config{
		Logger:   newDebugLogger(&buf),
		Observer: func(_ context.Context, ev idem.Event) { events = append(events, ev) },
	}, nil)
	ctx := context.Background()
	key := "secret-key-4f1c9a"
	idemhttp.Serve(ctx, e.Store, policy(), request(key, "fp"), insertPayment(1))
	idemhttp.Serve(ctx, e.Store, policy(), request(key, "fp"), insertPayment(1))
	idemhttp.Serve(ctx, e.Store, policy(), request(key, "other"), insertPayment(1))
	idemhttp.Serve(ctx, e.Store, policy(), request(key+"-2", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return nil, errors.New("fail")
	})
	logs := buf.String()
	if strings.Contains(logs, key) {
		t.Fatalf("logs contain the raw key:\n%s", logs)
	}
	hash := idem.KeyHash("0:|9:operation=13:createPayment", key) // the scope idemhttp.Serve renders for request()
	if !strings.Contains(logs, hash) {
		t.Fatalf("logs do not name the key by its hash %s:\n%s", hash, logs)
	}
	var kinds []string
	for _, ev := range events {
		kinds = append(kinds, string(ev.Kind))
		if strings.Contains(ev.KeyHash, key) {
			t.Fatalf("event carries the raw key: %+v", ev)
		}
	}
	want := "acquired completed replayed key_reused acquired released"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events %q; want %q", got, want)
	}
}

// TestCallerGivingUpIsNotAStoreError: a claim whose context has already ended fails, but the
// store did nothing wrong, so no store_error event is counted.
func TestCallerGivingUpIsNotAStoreError(t *testing.T) {
	t.Parallel()
	var events []idem.Event
	e := newEnv(t, &idem.Config{
		Observer: func(_ context.Context, ev idem.Event) { events = append(events, ev) },
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"})
	if err == nil {
		t.Fatal("a claim with a cancelled context succeeded")
	}
	for _, ev := range events {
		if ev.Kind == idem.EventStoreError {
			t.Fatalf("a cancelled caller was counted as a store error: %+v", ev)
		}
	}
	// The same failure with a live context (the store really is gone) is counted.
	e.Sch.Pool.Close()
	if _, err := e.Store.Claim(context.Background(), &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"}); err == nil {
		t.Fatal("a claim on a closed pool succeeded")
	}
	if n := len(events); n == 0 || events[n-1].Kind != idem.EventStoreError {
		t.Fatalf("events %+v; want a store_error for the closed pool", events)
	}
}

// A lease-mode claim commits without waiting for its WAL flush, but only the claim: the business
// transaction, which makes the outcome durable, commits with the connection's own setting, on the
// very connection the claim used.
func TestAsyncClaimLeavesTheBusinessCommitDurable(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	cfg, err := pgxpool.ParseConfig(sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // the claim and the business transaction share the one connection
	cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := idem.NewStore(pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	idem.RecordClaimSetting(s, "synchronous_commit")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var inside string
	_, err = s.Do(ctx, &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp"}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 201}, tx.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&inside)
	})
	if err != nil {
		t.Fatal(err)
	}
	var after string
	if err := pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if inside != "on" || after != "on" {
		t.Fatalf("synchronous_commit: %q in the business transaction, %q on the connection after it; want \"on\" for both: the claim's asynchronous commit must stay the claim's", inside, after)
	}
	var claimed string
	if err := pool.QueryRow(ctx, "SELECT operation FROM "+pgx.Identifier{sch.Name, sch.Table}.Sanitize()+" WHERE key = 'k'").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != " off" {
		t.Fatalf("synchronous_commit in the claim's own transaction: %q; want \"off\" (the claim commits without waiting for its flush)", strings.TrimSpace(claimed))
	}
}

// The claim sets the key's expiry to the TTL plus the handler's timeout, and a timely completion
// leaves it there (so that PostgreSQL can complete the key with a HOT update): a completed key is
// remembered at least its TTL after completing, and at most the timeout longer. In transaction
// mode on plain PostgreSQL the claim is the key's advisory lock and writes no row: the row is
// written once, at the completion, expiring the TTL after it.
func TestCompletionKeepsTheClaimsExpiry(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			sch := idemtest.TestSchema(t, nil)
			s, _ := idem.NewStore(sch.Pool, sch.Config())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const ttl, timeout = time.Hour, 30 * time.Second
			var claimed time.Time
			_, err := s.Do(ctx, &idem.DoParams{Scope: "s", Key: "k", Fingerprint: "fp", Claim: mode, TTL: ttl, Timeout: timeout},
				func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					err := tx.QueryRow(ctx, "SELECT expires_at FROM "+s.Table()+" WHERE key = 'k'").Scan(&claimed)
					if mode == idem.ClaimTransaction && errors.Is(err, pgx.ErrNoRows) {
						err = nil // the lock is the claim: no row until the completion
					}
					return &idem.Outcome{Status: 201}, err
				})
			if err != nil {
				t.Fatal(err)
			}
			if mode == idem.ClaimTransaction && !claimed.IsZero() {
				t.Fatal("transaction mode's claim wrote the key's row before the completion; want the advisory lock alone")
			}
			var expires, completed time.Time
			if err := sch.Pool.QueryRow(ctx, "SELECT expires_at, completed_at FROM "+s.Table()+" WHERE key = 'k'").Scan(&expires, &completed); err != nil {
				t.Fatal(err)
			}
			if !claimed.IsZero() && !expires.Equal(claimed) {
				t.Errorf("the completion moved expires_at from %v to %v; want it left as the claim set it", claimed, expires)
			}
			if kept := expires.Sub(completed); kept < ttl || kept > ttl+timeout {
				t.Errorf("the key is kept %v after completing; want between the TTL (%v) and TTL + timeout (%v)", kept, ttl, ttl+timeout)
			}
		})
	}
}

// A tenant, scope and key PostgreSQL text cannot hold are stored encoded (storedText), by every
// statement of both claim modes: the work executes once and replays, and a failed run releases
// its key (no statement sees the raw bytes, which PostgreSQL refuses with SQLSTATE 22021).
func TestTenantScopeAndKeyThatAreNotTextInBothModes(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	s, _ := idem.NewStore(sch.Pool, sch.Config())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		p := &idem.DoParams{Tenant: "t\xff\x00", Scope: "s\xfe", Key: "k\x00-" + mode.String(), Fingerprint: "fp", Claim: mode}
		if _, err := s.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) { return nil, errors.New("boom") }); err == nil || err.Error() != "boom" {
			t.Fatalf("%s, a failing run: %v; want its own error", mode, err)
		}
		for i, wantReplay := range []bool{false, true} {
			r, err := s.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil })
			if err != nil || r.Replayed != wantReplay {
				t.Fatalf("%s, request %d: %+v, %v; want replayed=%v", mode, i+1, r, err, wantReplay)
			}
		}
	}
}
