package idem_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// A caller that leaves while its lease-mode claim batch is on the wire leaves no claim behind:
// the batch is waited for, and the claim it turned out to make is released, so the retry
// executes at once instead of answering in-progress for the lease. The claim is made slow by an
// uncommitted row of the same key in another transaction: the claim waits for its lock, the
// caller's context is cancelled meanwhile, and the lock is let go after that. The cancel request
// pgx sends for an abandoned statement needs a new connection, which this test's network makes
// slow (as a real one can be, while a release goes out at once on a warm pooled connection): the
// claim commits on the server before the cancel arrives.
func TestCallerLeavingDuringTheClaimBatchLeavesNoClaim(t *testing.T) {
	t.Parallel()
	for _, path := range claimPaths { // the fast path's batch, and the full claim's
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			var slowDials atomic.Bool
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				if slowDials.Load() {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(time.Second):
					}
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			e := newEnv(t, &idem.Config{Topology: path.topology}, &idemtest.SchemaOpts{DialFunc: dial})
			e.Warm(4)
			slowDials.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "slow-claim", Operation: "op", Fingerprint: "fp", Lease: time.Minute}

			blocker, err := e.Sch.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(context.Background())
			if _, err := blocker.Exec(ctx, "INSERT INTO "+e.Store.Table()+` (tenant, scope, key, operation, fingerprint, state,
				owner_token, lease_expires_at, expires_at) VALUES ('', 's', 'slow-claim', 'op', 'fp', 'in_flight', gen_random_uuid(), now(), now())`); err != nil {
				t.Fatal(err)
			}

			cctx, leave := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := e.Store.Do(cctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
					return nil, errors.New("the handler ran for a caller that had left")
				})
				done <- err
			}()
			waitForLockWait(t, e, ctx)
			leave()
			var doErr error
			returned := false
			select { // a Do that gives up on the batch returns here, and its release runs before the claim commits
			case doErr = <-done:
				returned = true
			case <-time.After(200 * time.Millisecond):
			}
			if err := blocker.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if !returned {
				select {
				case doErr = <-done:
				case <-ctx.Done():
					t.Fatal("Do did not return after its caller left and the claim's lock was let go")
				}
			}
			if !errors.Is(doErr, context.Canceled) {
				t.Fatalf("Do for a caller that left: %v; want context.Canceled", doErr)
			}

			r, err := e.Store.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil })
			if err != nil || r.Replayed {
				t.Fatalf("the retry: %+v, %v; want it to execute at once (the claim of the caller that left was given back)", r, err)
			}
		})
	}
}

// A caller that leaves while its lease-mode claim batch waits on another holder's row claims
// nothing: when the holder commits, the batch finds the key held, and Do returns for the caller
// that left without claiming again (the fast path, finding a row, does not go on to the full
// claim), leaving the holder's row as it was.
func TestCallerLeavingWhileTheKeyIsHeldClaimsNothing(t *testing.T) {
	t.Parallel()
	for _, path := range claimPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, &idem.Config{Topology: path.topology}, nil)
			e.Warm(4)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := &idem.DoParams{Scope: "s", Key: "held", Operation: "op", Fingerprint: "fp", Lease: time.Minute}
			const holder = "00000000-0000-4000-8000-000000000001"
			blocker, err := e.Sch.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(context.Background())
			if _, err := blocker.Exec(ctx, "INSERT INTO "+e.Store.Table()+` (tenant, scope, key, operation, fingerprint, state,
				owner_token, lease_expires_at, expires_at) VALUES ('', 's', 'held', 'op', 'fp', 'in_flight', $1, now() + interval '1 hour', now() + interval '1 hour')`, holder); err != nil {
				t.Fatal(err)
			}
			cctx, leave := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := e.Store.Do(cctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
					return nil, errors.New("the handler ran for a caller that had left")
				})
				done <- err
			}()
			waitForLockWait(t, e, ctx)
			leave()
			if err := blocker.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Do for a caller that left: %v; want context.Canceled", err)
				}
			case <-ctx.Done():
				t.Fatal("Do did not return after its caller left and the holder committed")
			}
			var token string
			var attempt, rows int
			if err := e.Sch.Pool.QueryRow(ctx, "SELECT min(owner_token::text), min(attempt), count(*) FROM "+e.Store.Table()).Scan(&token, &attempt, &rows); err != nil {
				t.Fatal(err)
			}
			if token != holder || attempt != 1 || rows != 1 {
				t.Fatalf("after the caller left: %d rows, token %s, attempt %d; want the holder's one row untouched (%s, attempt 1)", rows, token, attempt, holder)
			}
		})
	}
}

// waitForLockWait waits until a session of e's database waits for a lock.
func waitForLockWait(t *testing.T, e *env, ctx context.Context) {
	t.Helper()
	for {
		var n int
		if err := e.Sch.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%'||$1||'%'`, e.Sch.Name).Scan(&n); err != nil {
			t.Fatalf("waiting for the claim to wait for its lock: %v", err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the claim never waited for the lock the test holds")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The memory of abandoned claims keeps the real holder's claim when a later duplicate from the
// same process abandons one of its own on the same key (its claim batch failed, so it may or
// may not have claimed): a retry finds the key in flight, releases the holder's claim with the
// holder's token and executes at once, instead of waiting out the lease.
func TestAbandonedClaimIsNotHiddenByALaterDuplicate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp", Lease: time.Minute}
	held, err := e.Store.Claim(ctx, p)
	if err != nil || held.Status != idem.ClaimAcquired {
		t.Fatalf("claim: %+v, %v", held, err)
	}
	idem.Abandon(e.Store, held.Claim)          // the holder gave up, and its release failed
	idem.Abandon(e.Store, idem.UnmadeClaim(p)) // a later duplicate's batch failed
	r, err := e.Store.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) { return &idem.Outcome{Status: 201}, nil })
	if err != nil || r.Replayed {
		t.Fatalf("retry from the same process: %+v, %v; want it to release the holder's abandoned claim and execute at once", r, err)
	}
}

// A release never deletes a completed row: after a completion committed (its answer lost, say,
// so the holder cannot tell and gives the key back), a release with the same claim deletes
// nothing, and the retry replays instead of running the work again.
func TestReleaseAfterCommitKeepsTheOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp"}
	held, err := e.Store.Claim(ctx, p)
	if err != nil || held.Status != idem.ClaimAcquired {
		t.Fatalf("claim: %+v, %v", held, err)
	}
	if err := pgx.BeginFunc(ctx, e.Sch.Pool, func(tx pgx.Tx) error {
		return e.Store.CompleteTx(ctx, tx, held.Claim, &idem.Outcome{Status: 201, Body: []byte("done")}, 0)
	}); err != nil {
		t.Fatalf("complete and commit: %v", err)
	}
	if err := e.Store.Release(ctx, held.Claim); err != nil {
		t.Fatalf("release after the commit: %v", err)
	}
	r, err := e.Store.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		return nil, errors.New("the work ran again: the release deleted the completed row")
	})
	if err != nil || !r.Replayed || string(r.Outcome.Body) != "done" {
		t.Fatalf("retry after the release: %+v, %v; want the stored outcome replayed", r, err)
	}
}

// Completions and releases of a key duplicates may wait for send the key's notification, in
// both claim modes: a session listening on the store's channel receives it (a waiter relies on
// it to wake before its fallback poll).
func TestCompleteAndReleaseNotifyWaiters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	listen, err := pgx.Connect(ctx, e.Sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer listen.Close(context.Background())
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{idem.Channel(e.Store)}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		for _, outcome := range []string{"completes", "fails"} {
			p := &idem.DoParams{Scope: "s", Key: mode.String() + "-" + outcome, Operation: "op", Fingerprint: "fp", Claim: mode, Wait: time.Second}
			_, _ = e.Store.Do(ctx, p, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				if outcome == "fails" {
					return nil, errors.New("declined")
				}
				if mode == idem.ClaimTransaction {
					// Duplicates wait on the key's lock, so only a hold longer than their shortest
					// wait notifies (TestLockClaimShortHoldNotifiesNobody).
					time.Sleep(2 * idem.TxLockWait)
				}
				return &idem.Outcome{Status: 201}, nil
			})
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			n, err := listen.WaitForNotification(wctx)
			wcancel()
			if err != nil {
				t.Fatalf("%s, the handler %s: no notification within 5s (%v); want the key's", mode, outcome, err)
			}
			if n.Payload != idem.NotifyPayload(p) {
				t.Fatalf("%s, the handler %s: notification %q; want the key's payload %q", mode, outcome, n.Payload, idem.NotifyPayload(p))
			}
		}
	}
}

// In transaction mode the replay check that goes ahead of the claim compares the fingerprint:
// another request with a completed key's key is refused as a reuse, never replayed, and the
// first request's retry still replays.
func TestTransactionModeReplayCheckComparesTheFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p := &idem.DoParams{Scope: "s", Key: "k", Operation: "op", Fingerprint: "fp-first", Claim: idem.ClaimTransaction}
	ok := func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 201, Body: []byte("first")}, nil
	}
	if r, err := e.Store.Do(ctx, p, ok); err != nil || r.Replayed {
		t.Fatalf("first: %+v, %v", r, err)
	}
	other := *p
	other.Fingerprint = "fp-other"
	if r, err := e.Store.Do(ctx, &other, ok); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request with the completed key: %+v, %v; want ErrKeyReused", r, err)
	}
	if r, err := e.Store.Do(ctx, p, ok); err != nil || !r.Replayed || string(r.Outcome.Body) != "first" {
		t.Fatalf("the first request's retry: %+v, %v; want the replay", r, err)
	}
}
