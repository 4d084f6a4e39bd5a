package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// waitFor polls cond until it holds, failing with what when it does not within limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recv receives from ch, or fails the test after limit, saying what did not happen.
func recv[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("after %s: %s", limit, what)
	}
	var zero T
	return zero
}

// letGo returns a func that closes ch once, also registered as t's cleanup: a test that fails
// while a handler waits on ch must not leave it (and its transaction, which the schema's drop
// waits for) hanging.
func letGo(t testing.TB, ch chan struct{}) func() {
	var once sync.Once
	open := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return open
}

// TestWaitingDuplicateWakesOnNotification: a duplicate that waits (lease mode with a wait, and
// transaction mode) wakes when the first request commits or releases, by the holder's NOTIFY:
// its fallback poll is set to an hour and its wait to 30s, so a duplicate that relied on polling
// would still be sleeping when its caller's 10s deadline ends it.
func TestWaitingDuplicateWakesOnNotification(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		for _, first := range []string{"commits", "fails"} {
			t.Run(mode.String()+", the first "+first, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, nil, nil)
				idem.SetFallbackPoll(e.Store, time.Hour)
				p := &idem.DoParams{Key: "k", Operation: "charge", Fingerprint: "fp", Claim: mode, Wait: 30 * time.Second}
				entered, finish := make(chan struct{}), make(chan struct{})
				release := letGo(t, finish)
				firstDone := make(chan error, 1)
				go func() {
					_, err := e.Store.Do(context.Background(), p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
						close(entered)
						<-finish
						if first == "fails" {
							return nil, errors.New("declined")
						}
						return pay(1, "first")(ctx, tx)
					})
					firstDone <- err
				}()
				recv(t, entered, 10*time.Second, "the first request's handler never started")
				if idem.Listening(e.Store) {
					t.Fatal("a request that found its key free opened the listening connection; only a waiting duplicate needs it")
				}
				type result struct {
					r   *idem.DoResult
					err error
				}
				dup := make(chan result, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					r, err := e.Store.Do(ctx, p, pay(2, "duplicate"))
					dup <- result{r, err}
				}()
				// The duplicate's subscription opens the listener. Once the duplicate sleeps with
				// nothing new since its last claim, only a notification (or its hour-long poll) can
				// wake it.
				waitFor(t, 10*time.Second, "the duplicate never slept waiting for a notification", func() bool { return idem.Asleep(e.Store) == 1 })
				release()
				recv(t, firstDone, 10*time.Second, "the first request did not end once its handler was let go")
				d := recv(t, dup, 15*time.Second, "the duplicate did not end")
				switch first {
				case "commits":
					if d.err != nil || !d.r.Replayed || string(d.r.Outcome.Body) != "first" {
						t.Fatalf("duplicate = %+v, %v; want the first answer replayed as soon as it committed", d.r, d.err)
					}
				case "fails":
					if d.err != nil || d.r.Replayed || string(d.r.Outcome.Body) != "duplicate" {
						t.Fatalf("duplicate = %+v, %v; want it to run as soon as the first released the key", d.r, d.err)
					}
				}
				// The wake came from a listener that hears: its own check of the notification it
				// sends (the statement every completion and release sends) found nothing wrong.
				if err := e.Store.ListenerHealth(); err != nil {
					t.Fatalf("the listener is unhealthy after waking the duplicate: %v", err)
				}
			})
		}
	}
}

// hidden hides the pool's Config method: the store cannot open a listening connection from it.
type hidden struct{ idem.DB }

// TestWaitingFallsBackToPolling: when no notification comes (the holder's operation does not
// notify, or the store has no listener), a waiting duplicate still gets the replay by claiming
// again.
func TestWaitingFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"the holder sends no notification", "no listener"} {
		t.Run(c, func(t *testing.T) {
			t.Parallel()
			sch := idemtest.TestSchema(t, nil)
			if _, err := sch.Pool.Exec(context.Background(), "CREATE TABLE payments (key text, amount int)"); err != nil {
				t.Fatal(err)
			}
			var db idem.DB = sch.Pool
			if c == "no listener" {
				db = hidden{sch.Pool}
			}
			s, err := idem.NewStore(db, sch.Config())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			idem.SetFallbackPoll(s, 200*time.Millisecond)
			holder := &idem.DoParams{Key: "k", Operation: "charge", Fingerprint: "fp"} // no wait: no notification
			if c == "no listener" {
				holder.Wait = 10 * time.Second
			}
			entered, finish := make(chan struct{}), make(chan struct{})
			release := letGo(t, finish)
			go func() {
				s.Do(context.Background(), holder, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					close(entered)
					<-finish
					return pay(1, "first")(ctx, tx)
				})
			}()
			recv(t, entered, 10*time.Second, "the first request's handler never started")
			dup := make(chan *idem.DoResult, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				r, err := s.Do(ctx, &idem.DoParams{Key: "k", Operation: "charge", Fingerprint: "fp", Wait: 10 * time.Second}, pay(2, "dup"))
				if err != nil {
					t.Errorf("duplicate: %v", err)
				}
				dup <- r
			}()
			time.Sleep(300 * time.Millisecond) // let the duplicate start waiting (its outcome does not depend on it)
			release()
			if r := recv(t, dup, 20*time.Second, "the duplicate did not end"); r == nil || !r.Replayed || string(r.Outcome.Body) != "first" {
				t.Fatalf("duplicate = %+v; want the first answer replayed", r)
			}
			if c == "no listener" && idem.Listening(s) {
				t.Fatal("a store on a DB without a pool config listens")
			}
		})
	}
}

// claimCounter counts the claim statements sent (lease mode: a query; transaction mode: a batch).
type claimCounter struct {
	sql atomic.Value // string
	n   atomic.Int64
}

func (c *claimCounter) count(sql string) {
	if want, _ := c.sql.Load().(string); sql == want {
		c.n.Add(1)
	}
}
func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.count(d.SQL)
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.count(d.SQL)
}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestDuplicateStormWithWait: 200 concurrent requests with one key and a wait, on a pool of 8
// connections, execute once and answer every duplicate with the replay. While the first is held
// in flight, every duplicate gets to claim and then waits holding no connection: a request for
// another key still runs before the first is let go.
func TestDuplicateStormWithWait(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			claims := &claimCounter{}
			e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 8, Tracer: claims})
			claims.sql.Store(idem.ClaimSQL(e.Store, mode))
			e.Warm(8)
			p := policy()
			p.Claim = mode
			p.Wait = 20 * time.Second
			// The first request is held until every duplicate has claimed, which takes seconds
			// on a loaded machine: its handler must not time out meanwhile.
			p.Timeout = 60 * time.Second
			var calls atomic.Int32
			started, letGo := make(chan struct{}), make(chan struct{})
			fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				if calls.Add(1) == 1 {
					close(started)
				}
				select {
				case <-letGo:
				case <-time.After(30 * time.Second):
					return nil, errors.New("the test never let the first request go")
				}
				return insertPayment(1)(ctx, tx)
			}
			const n = 200
			results := make([]*idemhttp.Result, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					results[i], errs[i] = idemhttp.Serve(ctx, e.Store, p, request("storm", "fp"), fn)
				}()
			}
			recv(t, started, 30*time.Second, "the first request's handler never started")
			waitFor(t, 30*time.Second, "not every duplicate got to claim while the first was in flight (do waiting duplicates hold the pool's connections?)", func() bool {
				return claims.n.Load() >= n
			})
			other, err := idemhttp.Serve(context.Background(), e.Store, p, request("other", "fp"), insertPayment(2))
			if err != nil || other.Kind != idemhttp.ResultExecuted {
				t.Errorf("a request for another key while %d duplicates wait = %+v, %v; want executed (the waiters exhaust the pool?)", n-1, other, err)
			}
			close(letGo)
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("the storm's requests did not all answer within 60s")
			}
			kinds := map[string]int{}
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				kinds[kindName(r)]++
			}
			if calls.Load() != 1 || kinds["executed"] != 1 || kinds["replayed"] != n-1 {
				t.Fatalf("handler ran %d times; results %v; want one execution and %d replays", calls.Load(), kinds, n-1)
			}
			if got := e.Count("SELECT count(*) FROM payments WHERE key = 'storm'"); got != 1 {
				t.Fatalf("%d business rows for the key; want 1", got)
			}
			t.Logf("%d claim statements for %d requests", claims.n.Load(), n)
		})
	}
}

// TestRetryAfterIsHonest: the Retry-After of an in-progress answer is the operation's expected
// handler time minus how long the holder has run, at least 1s and never past the lease; before
// the operation has run at all, as long again as the holder has run (at least 1s), never the
// whole lease for a request that has only just begun.
func TestRetryAfterIsHonest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	inFlight := func(op, key string, ranFor time.Duration) {
		t.Helper()
		r, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: key, Operation: op, Fingerprint: "fp", Lease: time.Minute})
		if err != nil || r.Status != idem.ClaimAcquired {
			t.Fatalf("claim %s = %+v, %v", key, r, err)
		}
		// A holder that has run for ranFor under a one-minute lease has that much less of it left.
		if _, err := e.Sch.Pool.Exec(ctx, "UPDATE "+e.Store.Table()+" SET created_at = created_at - $2::bigint * interval '1 millisecond', lease_expires_at = lease_expires_at - $2::bigint * interval '1 millisecond' WHERE key = $1", key, ranFor.Milliseconds()); err != nil {
			t.Fatal(err)
		}
	}
	retryAfter := func(op, key string) time.Duration {
		t.Helper()
		_, err := e.Store.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Operation: op, Fingerprint: "fp", Lease: time.Minute}, pay(1, "x"))
		var busy *idem.InProgressError
		if !errors.As(err, &busy) {
			t.Fatalf("duplicate of %s = %v; want in progress", key, err)
		}
		return busy.RetryAfter
	}
	// An operation that has run quickly: come back in a second, not in a minute.
	for i := range 5 {
		if _, err := e.Store.Do(ctx, &idem.DoParams{Scope: "s", Key: fmt.Sprintf("quick-%d", i), Operation: "quick", Fingerprint: "fp", Lease: time.Minute}, pay(1, "q")); err != nil {
			t.Fatal(err)
		}
	}
	idem.ObserveHandlerTime(e.Store, "ten-seconds", 10*time.Second) // expected: 10s + 4 × 5s = 30s
	idem.ObserveHandlerTime(e.Store, "slow", 10*time.Minute)
	for _, c := range []struct {
		name, op string
		ranFor   time.Duration
		want     time.Duration
	}{
		{"a quick operation", "quick", 0, time.Second},
		{"never run in this process, just begun: 1s, not the lease", "unknown", 0, time.Second},
		{"never run in this process, running for 20s: as long again", "unknown", 20 * time.Second, 20 * time.Second},
		{"never run in this process, running for 50s: the lease left", "unknown", 50 * time.Second, 10 * time.Second},
		{"expected 30s, running for 20s", "ten-seconds", 20 * time.Second, 10 * time.Second},
		{"expected 30s, running for 40s: at least 1s", "ten-seconds", 40 * time.Second, time.Second},
		{"expected 30m: never past the lease", "slow", 0, time.Minute},
	} {
		key := "held-" + c.name
		inFlight(c.op, key, c.ranFor)
		// One second of slack on either side: the database clock moves between the statements.
		if got := retryAfter(c.op, key); got < c.want-time.Second || got > c.want+time.Second {
			t.Errorf("%s: Retry-After %s; want %s", c.name, got, c.want)
		}
	}
}
