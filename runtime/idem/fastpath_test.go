package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The claim has two paths: a fast one, a plain insert that wins a key nobody has, and the full
// claim for any key that has a row. These tests run every guarantee the fast path could break
// on both paths, in both claim modes: a storm of duplicates executes once, an abandoned claim is
// taken over, a different request is refused while the first is in flight (before "in
// progress"), and a lost lease cannot commit.

// Each path also runs with Citus's statement set (Config.Topology: TopologyCitus) on plain
// PostgreSQL: without the guards that fail on purpose to skip the rest of a batch (see
// runtime/idem/topology.go). The statements a guard would skip then run, and the answers must
// decide alike. A key that has a row goes through the full claim on either.
type claimPath struct {
	name     string
	topology idem.Topology
}

var claimPaths = []claimPath{{"postgres", idem.TopologyPostgres}, {"citus statement set", idem.TopologyCitus}}

func newPathEnv(t *testing.T, path claimPath, conns int32) *env {
	t.Helper()
	return newEnv(t, &idem.Config{Topology: path.topology}, &idemtest.SchemaOpts{MaxConns: conns})
}

// eachClaimPathAndMode runs f in parallel subtests, one per claim path and claim mode, each on an
// env of its own (newPathEnv with a pool of conns).
func eachClaimPathAndMode(t *testing.T, conns int32, f func(t *testing.T, e *env, mode idem.ClaimMode)) {
	t.Helper()
	for _, path := range claimPaths {
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			t.Run(path.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				f(t, newPathEnv(t, path, conns), mode)
			})
		}
	}
}

// expireLease ends the lease of key's holder now, as if it had run out: a takeover needs no
// waiting for a clock.
func expireLease(t *testing.T, e *env, key string) {
	t.Helper()
	tag, err := e.Sch.Pool.Exec(context.Background(),
		"UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" SET lease_expires_at = statement_timestamp() - interval '1 second' WHERE key = $1", key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire the lease of key %s: %v, %d rows; want 1", key, err, tag.RowsAffected())
	}
}

// holdClaim claims key k as a request (operation op, fingerprint fp) that never completes nor
// releases it, with a lease of an hour: a crashed or a slow holder.
func holdClaim(t *testing.T, e *env) *idem.ClaimResult {
	t.Helper()
	r, err := e.Store.Claim(context.Background(), &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Hour})
	if err != nil || r.Status != idem.ClaimAcquired {
		t.Fatalf("claim = %+v, %v; want acquired", r, err)
	}
	return r
}

func TestClaimPathsStormOf64ExecutesOnce(t *testing.T) {
	t.Parallel()
	eachClaimPathAndMode(t, 16, func(t *testing.T, e *env, mode idem.ClaimMode) {
		e.Warm(16)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var (
			mu                     sync.Mutex
			runs, replays, pending int
			start                  = make(chan struct{})
			wg                     sync.WaitGroup
		)
		fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			mu.Lock()
			runs++
			mu.Unlock()
			return pay(1, "once")(ctx, tx)
		}
		errs := make(chan error, 64)
		for range 64 {
			wg.Go(func() {
				<-start
				p := &idem.DoParams{Scope: "s", Key: "storm", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: 10 * time.Second}
				r, err := e.Store.Do(ctx, p, fn)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, idem.ErrInProgress):
					pending++
				case err != nil:
					errs <- err
				case r.Replayed:
					if string(r.Outcome.Body) != "once" {
						errs <- errors.New("a replay answered " + string(r.Outcome.Body) + "; want the stored once")
					}
					replays++
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if runs != 1 || e.Payments() != 1 || e.Keys() != 1 {
			t.Fatalf("64 duplicates: the handler ran %d times, %d payments, %d key rows (%d replays, %d in progress); want 1, 1, 1",
				runs, e.Payments(), e.Keys(), replays, pending)
		}
	})
}

func TestClaimPathsTakeOverAnAbandonedClaim(t *testing.T) {
	t.Parallel()
	eachClaimPathAndMode(t, 4, func(t *testing.T, e *env, mode idem.ClaimMode) {
		ctx := context.Background()
		dead := holdClaim(t, e) // a crash: claimed, never completed nor released
		p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: time.Millisecond}
		if _, err := e.Store.Do(ctx, p, pay(1, "x")); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("during the dead holder's lease: %v; want ErrInProgress", err)
		}
		expireLease(t, e, "k")
		var attempt int
		r, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			c, _ := idem.ClaimFromContext(ctx)
			attempt = c.Attempt
			return pay(1, "taken over")(ctx, tx)
		})
		if err != nil || r.Replayed || string(r.Outcome.Body) != "taken over" || attempt != 2 {
			t.Fatalf("after the lease: %+v, %v, attempt %d; want executed as attempt 2", r, err, attempt)
		}
		// The dead holder's token fences nothing any more.
		err = pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
			return e.Store.CompleteTx(ctx, tx, dead.Claim, &idem.Outcome{Status: 200}, time.Hour)
		})
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the dead holder completes: %v; want ErrLeaseLost", err)
		}
		r, err = e.Store.Do(ctx, p, pay(1, "again"))
		if err != nil || !r.Replayed || string(r.Outcome.Body) != "taken over" {
			t.Fatalf("after the takeover completed: %+v, %v; want the replay of its outcome", r, err)
		}
		if n := e.Payments(); n != 1 {
			t.Fatalf("%d payments; want 1", n)
		}
	})
}

func TestClaimPathsRefuseAnotherRequestWhileInFlight(t *testing.T) {
	t.Parallel()
	eachClaimPathAndMode(t, 4, func(t *testing.T, e *env, mode idem.ClaimMode) {
		ctx := context.Background()
		holdClaim(t, e)
		other := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "other", Claim: mode, Wait: time.Millisecond}
		if _, err := e.Store.Do(ctx, other, pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("another request while the first is in flight: %v; want ErrKeyReused (before in progress)", err)
		}
		// Also once the holder's lease ran out: a different request never inherits it.
		expireLease(t, e, "k")
		if _, err := e.Store.Do(ctx, other, pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("another request after the holder's lease: %v; want ErrKeyReused", err)
		}
		if n := e.Payments(); n != 0 {
			t.Fatalf("%d payments; want none", n)
		}
	})
}

// A lease taken over while the handler runs cannot commit its work, whichever path claimed it.
func TestClaimPathsFenceALostLease(t *testing.T) {
	t.Parallel()
	for _, path := range claimPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			e := newPathEnv(t, path, 4)
			idem.DisableRenewal(e.Store)
			ctx := context.Background()
			p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Hour}
			_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				// Another request takes the key over while this handler runs.
				expireLease(t, e, "k")
				r, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Hour})
				if err != nil || r.Status != idem.ClaimTakenOver {
					t.Errorf("the takeover = %+v, %v; want taken over", r, err)
				}
				return pay(1, "lost")(ctx, tx)
			})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("the first holder after the takeover: %v; want ErrLeaseLost", err)
			}
			if n := e.Payments(); n != 0 {
				t.Fatalf("%d payments; want none: a lost lease committed its work", n)
			}
		})
	}
}

// A lease-mode duplicate of a key in flight is refused by the fast claim's guard and then
// answered by the full claim: two round trips, one on the full claim alone, with no rollback in
// between (the fast claim's failure leaves the connection idle). Twenty duplicates, one after the
// other, on a pool of two, take exactly that many round trips and open no connection.
func TestInFlightDuplicatesKeepTheirConnections(t *testing.T) {
	t.Parallel()
	for _, path := range claimPaths[:1] { // the path with guards: without them, rollbacks
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			trips := &queryCounter{}
			e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4, Tracer: trips})
			idem.KeepOwedRollbacks(e.Store)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "held", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimLease}
			started, gate := make(chan struct{}), make(chan struct{})
			release := letGo(t, gate)
			holder := make(chan error, 1)
			go func() {
				_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					close(started)
					<-gate
					return pay(1, "held")(ctx, tx)
				})
				holder <- err
			}()
			recv(t, started, 10*time.Second, "the holder's handler never started")
			// One duplicate first, so that the pool's second connection is open.
			if _, err := e.Store.Do(ctx, p, pay(1, "dup")); !errors.Is(err, idem.ErrInProgress) {
				t.Fatalf("duplicate: %v; want ErrInProgress", err)
			}
			opened, sent := e.Sch.Pool.Stat().NewConnsCount(), trips.n.Load()
			for i := range 20 {
				if _, err := e.Store.Do(ctx, p, pay(1, "dup")); !errors.Is(err, idem.ErrInProgress) {
					t.Fatalf("duplicate %d: %v; want ErrInProgress", i, err)
				}
			}
			want := int64(2 * 20) // the fast batch, the full claim
			if n := trips.n.Load() - sent; n != want {
				t.Errorf("20 duplicates of a key in flight took %d round trips; want %d", n, want)
			}
			if n := e.Sch.Pool.Stat().NewConnsCount() - opened; n != 0 {
				t.Errorf("20 duplicates of a key in flight opened %d connections; want 0 (each should give its connection back idle)", n)
			}
			release()
			if err := recv(t, holder, 10*time.Second, "the holder never finished"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A completed key an operator made permanent (expires_at = 'infinity') is replayed by every claim
// path in both modes: the Store reads the row's times in Go, and must order 'infinity' after
// every time as PostgreSQL does (pgx returns it with a zero time.Time), or a transaction-mode
// claim would take the key for expired and run the request again.
func TestClaimPathsReplayAKeyRememberedForever(t *testing.T) {
	t.Parallel()
	eachClaimPathAndMode(t, 4, func(t *testing.T, e *env, mode idem.ClaimMode) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p := &idem.DoParams{Scope: "s", Key: "forever", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: time.Millisecond}
		if r, err := e.Store.Do(ctx, p, pay(1, "once")); err != nil || r.Replayed {
			t.Fatalf("first execution: %+v, %v", r, err)
		}
		tag, err := e.Sch.Pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" SET expires_at = 'infinity' WHERE key = 'forever'")
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("remember key forever for good: %v, %d rows", err, tag.RowsAffected())
		}
		for i := range 2 {
			r, err := e.Store.Do(ctx, p, pay(1, "again"))
			if err != nil || !r.Replayed || string(r.Outcome.Body) != "once" {
				t.Fatalf("retry %d of a key remembered for good: %+v, %v; want the replay of once", i, r, err)
			}
		}
		q := *p
		q.Fingerprint = "other"
		if _, err := e.Store.Do(ctx, &q, pay(1, "other")); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("another request with the key: %v; want ErrKeyReused", err)
		}
		if n := e.Payments(); n != 1 {
			t.Fatalf("%d payments; want 1", n)
		}
	})
}
