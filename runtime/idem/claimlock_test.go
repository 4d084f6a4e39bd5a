package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// In transaction mode on plain PostgreSQL the claim is an advisory lock on the key, held by the
// business transaction, and the key's row is written once, at the completion. The storm, the
// takeover and the mismatch of an abandoned lease are in fastpath_test.go (its "fast path"
// rows take this path in transaction mode); these are what only this path can get wrong.

// held starts a transaction-mode request for key whose handler blocks until the returned func
// is called; it returns once the handler runs (the lock is held), and done receives its error.
func held(t *testing.T, e *env, key string) (release func(), done <-chan error) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	release = letGo(t, gate)
	errc := make(chan error, 1)
	go func() {
		p := &idem.DoParams{Scope: "s", Key: key, Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			// The lock taken ahead of the BEGIN is the business transaction's.
			var locks int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted").Scan(&locks); err != nil || locks != 1 {
				t.Errorf("the handler's transaction holds %d advisory locks (%v); want the key's one", locks, err)
			}
			close(started)
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return pay(1, "first")(ctx, tx)
		})
		errc <- err
	}()
	recv(t, started, 10*time.Second, "the holder's handler never started")
	return release, errc
}

// holdEveryKeysLock takes, in a transaction of its own on e's pool, the one lock every key of
// e.Store has after SameLockForEveryKey; the transaction ends with the test unless the caller
// ends it first.
func holdEveryKeysLock(ctx context.Context, t *testing.T, e *env) pgx.Tx {
	t.Helper()
	tx, err := e.Sch.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if err := idem.HoldTheLockOfEveryKey(ctx, e.Store, tx); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A duplicate of a holder that never commits gets its in-progress answer once its wait on the
// lock runs out, not a hang; a different request too (the row does not exist yet, so nothing
// can tell it apart before the holder completes), and once the holder has committed, the
// different request is refused as key-reused and the duplicate replays.
func TestLockClaimWaitIsBoundedAndMismatchRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	release, done := held(t, e, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, fp := range []string{"fp", "other"} {
		p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: fp, Claim: idem.ClaimTransaction, Wait: 20 * time.Millisecond}
		if _, err := e.Store.Do(ctx, p, pay(1, "second")); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("fingerprint %s while the holder runs: %v; want ErrInProgress (within the wait, before the 10s deadline)", fp, err)
		}
	}
	if n := e.Keys(); n != 0 {
		t.Fatalf("%d key rows while the holder runs; want none: the lock is the claim", n)
	}
	// A mismatch that waits is woken by the holder's commit and refused.
	mismatch := make(chan error, 1)
	go func() {
		p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "other", Claim: idem.ClaimTransaction, Wait: 20 * time.Second}
		_, err := e.Store.Do(ctx, p, pay(1, "second"))
		mismatch <- err
	}()
	release()
	if err := recv(t, done, 10*time.Second, "the holder did not finish"); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	if err := recv(t, mismatch, 10*time.Second, "the waiting mismatch did not answer"); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("a different request after the holder committed: %v; want ErrKeyReused", err)
	}
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	r, err := e.Store.Do(ctx, p, pay(1, "second"))
	if err != nil || !r.Replayed || string(r.Outcome.Body) != "first" {
		t.Fatalf("a duplicate after the holder committed: %+v, %v; want the replay of first", r, err)
	}
	if e.Payments() != 1 || e.Keys() != 1 {
		t.Fatalf("%d payments, %d key rows; want 1 and 1", e.Payments(), e.Keys())
	}
	var attempt int
	var state string
	if err := e.Sch.Pool.QueryRow(ctx, "SELECT attempt, state FROM "+e.Store.Table()+" WHERE key = 'k'").Scan(&attempt, &state); err != nil || attempt != 1 || state != "complete" {
		t.Fatalf("the key's row: attempt %d, state %q, %v; want 1, complete", attempt, state, err)
	}
}

// Two keys whose lock ids collide wait for each other, and nothing more: the second executes
// as itself once the first commits, never as a replay of the first.
func TestLockClaimCollidingIDsOnlyWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	idem.SameLockForEveryKey(e.Store)
	release, done := held(t, e, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "b", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction, Wait: 20 * time.Millisecond}
	if _, err := e.Store.Do(ctx, p, pay(2, "b")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("another key with the same lock id while the first runs: %v; want ErrInProgress", err)
	}
	other := make(chan error, 1)
	go func() {
		q := *p
		q.Wait = 20 * time.Second
		r, err := e.Store.Do(ctx, &q, pay(2, "b"))
		if err == nil && (r.Replayed || string(r.Outcome.Body) != "b") {
			err = errors.New("answered " + string(r.Outcome.Body) + "; want its own execution")
		}
		other <- err
	}()
	release()
	if err := recv(t, done, 10*time.Second, "the first key's holder did not finish"); err != nil {
		t.Fatalf("the first key: %v", err)
	}
	if err := recv(t, other, 10*time.Second, "the second key did not answer"); err != nil {
		t.Fatalf("the second key: %v", err)
	}
	if e.Payments() != 2 || e.Keys() != 2 {
		t.Fatalf("%d payments, %d key rows; want 2 and 2", e.Payments(), e.Keys())
	}
}

// A lease-mode claim takes no advisory lock: when one claims the key while a transaction-mode
// holder runs, the holder's completion finds the row someone else's and cannot commit its work.
func TestLockClaimCompletionIsFencedByTheRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	_, err := e.Store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		r, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Hour})
		if err != nil || r.Status != idem.ClaimAcquired {
			t.Errorf("a lease-mode claim while the holder runs = %+v, %v; want acquired (no row yet)", r, err)
		}
		return pay(1, "fenced")(ctx, tx)
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the holder's completion after the lease-mode claim: %v; want ErrLeaseLost", err)
	}
	if n := e.Payments(); n != 0 {
		t.Fatalf("%d payments; want none: the fenced holder committed its work", n)
	}
	var state string
	if err := e.Sch.Pool.QueryRow(ctx, "SELECT state FROM "+e.Store.Table()+" WHERE key = 'k'").Scan(&state); err != nil || state != "in_flight" {
		t.Fatalf("the key's row: %q, %v; want the lease-mode claim's, in flight", state, err)
	}
}

// A replay never waits for the key's lock: a completed row is final until it expires, so when the
// lock is held (by another replay of the key for an instant, or here by a holder of a colliding
// id) the read behind the lock's failed try answers, before any wait.
func TestLockClaimReplayNeverWaitsForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	idem.SameLockForEveryKey(e.Store)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "done", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction, Wait: 20 * time.Millisecond}
	if _, err := e.Store.Do(ctx, p, pay(1, "done")); err != nil {
		t.Fatal(err)
	}
	// Someone holds the lock every key of this Store has.
	holdEveryKeysLock(ctx, t, e)
	if r, err := e.Store.Do(ctx, p, pay(1, "again")); err != nil || !r.Replayed || string(r.Outcome.Body) != "done" {
		t.Fatalf("a replay while the key's lock is held: %+v, %v; want the replay of done", r, err)
	}
	q := *p
	q.Fingerprint = "other"
	if _, err := e.Store.Do(ctx, &q, pay(1, "other")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("a mismatch while the key's lock is held: %v; want ErrKeyReused", err)
	}
	q = *p
	q.Key = "new"
	if _, err := e.Store.Do(ctx, &q, pay(1, "new")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a new key while its lock is held: %v; want ErrInProgress (it waits on the lock)", err)
	}
}

// A claim whose lock try fails reads the key's row all the same, and a row that answers without
// the lock (a remembered completed row: a replay) is the answer. Any other row must not be taken
// without the lock, however takeable it reads: here the key's completed row has expired (a new
// key again), and the lock is held. The claim must wait, be told it is in progress, and execute
// nothing; once the lock is free, the key executes anew.
func TestLockClaimWithoutTheLockNeverOwns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	idem.SameLockForEveryKey(e.Store)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "old", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction, Wait: 20 * time.Millisecond}
	if r, err := e.Store.Do(ctx, p, pay(1, "first")); err != nil || r.Replayed {
		t.Fatalf("the key's first execution: %+v, %v", r, err)
	}
	tag, err := e.Sch.Pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" SET expires_at = statement_timestamp() - interval '1 second' WHERE key = 'old'")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire key old: %v, %d rows", err, tag.RowsAffected())
	}
	tx := holdEveryKeysLock(ctx, t, e)
	if _, err := e.Store.Do(ctx, p, pay(1, "anew")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("an expired key while its lock is held: %v; want ErrInProgress", err)
	}
	if n := e.Payments(); n != 1 {
		t.Fatalf("%d payments while the key's lock was held; want 1 (its first execution)", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Store.Do(ctx, p, pay(1, "anew")); err != nil || r.Replayed || string(r.Outcome.Body) != "anew" {
		t.Fatalf("the expired key once the lock is free: %+v, %v; want its execution anew", r, err)
	}
	if n := e.Payments(); n != 2 {
		t.Fatalf("%d payments; want 2", n)
	}
}

// A duplicate of a key in flight pays the failed try and then the contended claim, both on one
// connection: the first batch's failure leaves it idle, and the second goes out on it without a
// second acquisition from the pool (two round trips per pool acquisition, per claim try), and
// no connection is opened.
func TestLockClaimContendedKeepsItsConnection(t *testing.T) {
	t.Parallel()
	trips := &queryCounter{}
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 2, Tracer: trips})
	e.Warm(2)
	release, done := held(t, e, "k")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opened, acquired, sent := e.Sch.Pool.Stat().NewConnsCount(), e.Sch.Pool.Stat().AcquireCount(), trips.n.Load()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction, Wait: time.Millisecond}
	for i := range 10 {
		if _, err := e.Store.Do(ctx, p, pay(1, "dup")); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("duplicate %d: %v; want ErrInProgress", i, err)
		}
	}
	n, a := trips.n.Load()-sent, e.Sch.Pool.Stat().AcquireCount()-acquired
	if a == 0 || n != 2*a {
		t.Errorf("10 duplicates of a key in flight took %d round trips on %d pool acquisitions; want two round trips (the failed try, the contended claim) per acquisition", n, a)
	}
	if n := e.Sch.Pool.Stat().NewConnsCount() - opened; n != 0 {
		t.Errorf("10 duplicates opened %d connections; want 0", n)
	}
	release()
	if err := recv(t, done, 10*time.Second, "the holder never finished"); err != nil {
		t.Fatal(err)
	}
}

// A replay is one round trip (the lock's try, the read and the BEGIN in one batch, whose ROLLBACK
// rides in the connection's next batch), whether the key's lock is free or held (the read then
// answers from the key's completed row), and opens no connection.
func TestLockClaimReplayRoundTrips(t *testing.T) {
	t.Parallel()
	trips := &queryCounter{}
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4, Tracer: trips})
	e.Warm(2) // the holder below takes one, the replays have the other
	idem.SameLockForEveryKey(e.Store)
	idem.KeepOwedRollbacks(e.Store) // a replay's ROLLBACK rides in the next one's batch
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "done", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction, Wait: 10 * time.Second}
	if _, err := e.Store.Do(ctx, p, pay(1, "done")); err != nil {
		t.Fatal(err)
	}
	replays := func(what string, want int64) {
		t.Helper()
		opened, sent := e.Sch.Pool.Stat().NewConnsCount(), trips.n.Load()
		for i := range 20 {
			if r, err := e.Store.Do(ctx, p, pay(1, "again")); err != nil || !r.Replayed || string(r.Outcome.Body) != "done" {
				t.Fatalf("replay %d %s: %+v, %v; want the replay of done", i, what, r, err)
			}
		}
		if n := trips.n.Load() - sent; n != want {
			t.Errorf("20 replays %s took %d round trips; want %d", what, n, want)
		}
		if n := e.Sch.Pool.Stat().NewConnsCount() - opened; n != 0 {
			t.Errorf("20 replays %s opened %d connections; want 0", what, n)
		}
	}
	replays("with the lock free", 20)
	// Someone holds the lock every key of this Store has, on the pool's other connection.
	holdEveryKeysLock(ctx, t, e)
	replays("with the lock held", 20)
}

// A transaction-mode replay does not take the key's lock (sql/claim_lock.sql): the transaction
// its batch began stays open until the connection's next batch (owed.go), and a duplicate still
// waiting for the key's first holder must not wait for that replay's rollback too.
func TestReplayTakesNoLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 4})
	idem.KeepOwedRollbacks(e.Store) // the replay's transaction stays open until the Store closes
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "done", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	if _, err := e.Store.Do(ctx, p, pay(1, "done")); err != nil {
		t.Fatal(err)
	}
	for _, fp := range []string{"fp", "another request"} { // a replay, then a mismatch
		q := *p
		q.Fingerprint = fp
		if _, err := e.Store.Do(ctx, &q, pay(1, "again")); err != nil && !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("Do with fingerprint %q: %v", fp, err)
		}
		tx, err := e.Sch.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var free bool
		err = tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", idem.LockID(e.Store, p)).Scan(&free)
		_ = tx.Rollback(ctx)
		if err != nil || !free {
			t.Fatalf("after a claim with fingerprint %q the key's lock is held (%v): the answered claim's open transaction keeps it, and a waiting duplicate waits for its rollback", fp, err)
		}
	}
}

// A transaction-mode completion under the key's lock notifies nobody when the lock was held for
// less than any waiter's bounded wait on it: such waiters were woken by the commit itself.
// (TestCompleteAndReleaseNotifyWaiters checks that a longer hold notifies.) Here "long" is an
// hour, so every hold is short; the test's own notification behind the request must be the
// first the listener reads.
func TestLockClaimShortHoldNotifiesNobody(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	idem.SetNotifyAfter(e.Store, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listen, channel := listenTo(t, ctx, e)
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimTransaction}
	if _, err := e.Store.Do(ctx, p, pay(1, "quick")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sch.Pool.Exec(ctx, "NOTIFY "+channel+", 'sentinel'"); err != nil {
		t.Fatal(err)
	}
	n, err := listen.WaitForNotification(ctx)
	if err != nil || n.Payload != "sentinel" {
		t.Fatalf("first notification after a short hold: %+v, %v; want the test's sentinel (the completion notified)", n, err)
	}
}

// A replay under the key's lock ends the batch's implicit transaction with a failed guard, and
// nothing of it may stay on the connection. On one connection, after a storm of 64 replays and
// mismatches of a completed key (all answered, nothing executed), the connection still claims
// as it should: a new key executes, a different request is refused while a lease-mode claim
// holds its key (before in progress), the same request is told in progress and takes the key
// over once the lease ran out, and an expired completed key runs anew.
func TestLockClaimReplayLeavesTheConnectionReadingRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	do := func(key, fp string, fn idem.HandlerFunc) (*idem.DoResult, error) {
		return e.Store.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Operation: "op", Fingerprint: fp, Claim: idem.ClaimTransaction, Wait: time.Millisecond}, fn)
	}
	if r, err := do("done", "fp", pay(1, "done")); err != nil || r.Replayed {
		t.Fatalf("first: %+v, %v; want executed", r, err)
	}
	var (
		mu                  sync.Mutex
		replays, mismatches int
		wg                  sync.WaitGroup
		start               = make(chan struct{})
	)
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			<-start
			fp := "fp"
			if i%8 == 0 {
				fp = "other"
			}
			r, err := do("done", fp, pay(1, "again"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case fp == "other" && errors.Is(err, idem.ErrKeyReused):
				mismatches++
			case fp == "fp" && err == nil && r.Replayed && string(r.Outcome.Body) == "done":
				replays++
			default:
				errs <- fmt.Errorf("a request with fingerprint %s: %+v, %v; want the replay of done, or ErrKeyReused for another request", fp, r, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if replays != 56 || mismatches != 8 || e.Payments() != 1 {
		t.Fatalf("64 requests of a completed key: %d replays, %d refused, %d payments; want 56, 8, 1", replays, mismatches, e.Payments())
	}
	// The same connection, after all those replays.
	if r, err := do("new", "fp", pay(1, "new")); err != nil || r.Replayed || string(r.Outcome.Body) != "new" {
		t.Fatalf("a new key after replays: %+v, %v; want executed", r, err)
	}
	held, err := e.Store.Claim(ctx, &idem.ClaimParams{Scope: "s", Key: "held", Operation: "op", Fingerprint: "fp", Lease: time.Hour})
	if err != nil || held.Status != idem.ClaimAcquired {
		t.Fatalf("lease-mode claim = %+v, %v", held, err)
	}
	if _, err := do("done", "fp", pay(1, "again")); err != nil {
		t.Fatal(err)
	}
	if _, err := do("held", "other", pay(1, "x")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request while a lease-mode claim holds the key, after a replay: %v; want ErrKeyReused", err)
	}
	if _, err := do("done", "fp", pay(1, "again")); err != nil {
		t.Fatal(err)
	}
	if _, err := do("held", "fp", pay(1, "x")); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("the same request while a lease-mode claim holds the key, after a replay: %v; want ErrInProgress", err)
	}
	expireLease(t, e, "held")
	if _, err := do("done", "fp", pay(1, "again")); err != nil {
		t.Fatal(err)
	}
	var attempt int
	r, err := do("held", "fp", func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		attempt = c.Attempt
		return pay(1, "taken over")(ctx, tx)
	})
	if err != nil || r.Replayed || attempt != 2 {
		t.Fatalf("after the lease-mode holder's lease, after a replay: %+v, %v, attempt %d; want taken over as attempt 2", r, err, attempt)
	}
	// A completed key whose TTL ran out is a new key again: it must not be replayed.
	tag, err := e.Sch.Pool.Exec(ctx, "UPDATE "+pgx.Identifier{e.Sch.Name, e.Sch.Table}.Sanitize()+" SET expires_at = statement_timestamp() - interval '1 second' WHERE key = 'done'")
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire key done: %v, %d rows", err, tag.RowsAffected())
	}
	if r, err := do("done", "other", pay(1, "anew")); err != nil || r.Replayed || string(r.Outcome.Body) != "anew" {
		t.Fatalf("an expired completed key: %+v, %v; want executed anew", r, err)
	}
	if n := e.Payments(); n != 4 {
		t.Fatalf("%d payments; want 4 (done, new, taken over, anew)", n)
	}
}

// The claim's read and its guard are one statement (sql/claim_read_guarded.sql) whose answer is
// the key's row followed, when nobody may take it, by the guard's error: it relies on the row
// reaching the client before the error. With the planner pushed to parallel plans everywhere
// (parallel costs of zero, and the setting that forces a parallel plan where one is allowed), a
// replay, a mismatch and an in-progress answer still come from the row, in both modes.
func TestGuardedReadAnswersUnderParallelPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var version int
	if err := e.Sch.Pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	force := "force_parallel_mode" // debug_parallel_query from PostgreSQL 16 on
	if version >= 160000 {
		force = "debug_parallel_query"
	}
	cfg, err := pgxpool.ParseConfig(e.Sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"search_path": e.Sch.Name, force: "on", "parallel_setup_cost": "0",
		"parallel_tuple_cost": "0", "min_parallel_table_scan_size": "0", "min_parallel_index_scan_size": "0"} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := idem.NewStore(pool, e.Sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	// A lease-mode holder still running, for the in-progress answers.
	started, gate := make(chan struct{}), make(chan struct{})
	release := letGo(t, gate)
	holder := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, &idem.DoParams{Scope: "s", Key: "held", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimLease},
			func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				close(started)
				<-gate
				return pay(1, "held")(ctx, tx)
			})
		holder <- err
	}()
	recv(t, started, 10*time.Second, "the lease-mode holder's handler never started")

	for _, mode := range []idem.ClaimMode{idem.ClaimTransaction, idem.ClaimLease} {
		do := func(key, fp, body string) (*idem.DoResult, error) {
			return s.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Operation: "op", Fingerprint: fp, Claim: mode}, pay(1, body))
		}
		key := fmt.Sprintf("done-%d", mode)
		if r, err := do(key, "fp", "first"); err != nil || r.Replayed {
			t.Fatalf("mode %v: first request: %+v, %v; want executed", mode, r, err)
		}
		if r, err := do(key, "fp", "again"); err != nil || !r.Replayed || string(r.Outcome.Body) != "first" {
			t.Fatalf("mode %v: the same request again: %+v, %v; want the replay of first", mode, r, err)
		}
		if _, err := do(key, "other", "other"); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("mode %v: a different request with the key: %v; want ErrKeyReused", mode, err)
		}
		var inProgress *idem.InProgressError
		if _, err := do("held", "fp", "dup"); !errors.As(err, &inProgress) {
			t.Fatalf("mode %v: a duplicate of the running holder: %v; want an InProgressError", mode, err)
		}
		if _, err := do("held", "other", "dup"); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("mode %v: a different request with the running holder's key: %v; want ErrKeyReused", mode, err)
		}
	}
	release()
	if err := recv(t, holder, 10*time.Second, "the holder never finished"); err != nil {
		t.Fatalf("holder: %v", err)
	}
	if n := countRows(t, e.Sch.Pool, "SELECT count(*) FROM payments"); n != 3 {
		t.Fatalf("%d payments; want 3 (each first request once, the holder once)", n)
	}
}
