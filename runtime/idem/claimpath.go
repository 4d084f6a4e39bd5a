package idem

import (
	"context"
	"time"
)

// claimer is one way of claiming a key: the path a Store takes in one claim mode. The Store
// chooses its two paths once, when its topology settles (chooseClaimers), from the topology and
// whether it holds its connections (its DB is a pool): no request decides its path again.
//
//	claim mode   | pool, plain PostgreSQL or a pooler | pool, Citus's statements | no pool (any topology)
//	lease        | leaseBatch                         | leaseBatch               | leaseOwnTx
//	transaction  | txAdvisoryLock                     | txRowLock                | txRowLock
//
// The statement set (plainSet or citusSet, stmtset.go) is the topology's value too: a path sends
// its set's statements and never asks which topology it is on; the sets differ in the guards
// Citus's leaves out, its propagated settings and the fast claim's order (topology.go).
//
// A path decides; it does not report. What it decided is one attempt value, which its one
// caller, the wait loop (Store.claimWaiting), settles once (Store.settleAttempt).
type claimer interface {
	// claim makes one claim of p's key. wait bounds a transaction-mode claim's wait on a
	// holder.
	claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) attempt
	// String names the path, for logs and tests.
	String() string
}

// attempt is what one claim of a key did.
type attempt struct {
	// c is the claim made or tried: its token fences everything that follows, and a store
	// error or a caller gone is reported with its key's hash.
	c *Claim
	// tx is the business transaction the claim began: the caller's when res owns the key,
	// and otherwise to be ended by it (rolled back, or handed on: owed.go).
	tx  *bizTx
	res *claimResult // nil when err is set
	// sent is when the claim's statements were sent (the replay cache and the events time it).
	sent time.Time
	// locked says a transaction-mode claim's wait on a holder ran out: res is in progress,
	// and nothing is reported until the wait loop gives up.
	locked bool
	err    error // a store error: the request gives up
}

// leaseBatch: lease mode when the Store holds the connection. The fast claim and, for a key that
// has a row, the full claim, each in one round trip that also begins the business transaction
// when the claim is this request's (Store.claimAndBegin).
type leaseBatch struct{}

func (leaseBatch) claim(ctx context.Context, s *Store, p *DoParams, _ time.Duration) attempt {
	return s.claimAndBegin(ctx, p)
}

func (leaseBatch) String() string { return "lease: claim and begin" }

// leaseOwnTx: lease mode on a DB that is not a pool: the claim in a transaction of its own
// (Store.claim); the caller begins the business transaction.
type leaseOwnTx struct{}

func (leaseOwnTx) claim(ctx context.Context, s *Store, p *DoParams, _ time.Duration) attempt {
	return s.claim(ctx, p)
}

func (leaseOwnTx) String() string { return "lease: own transaction" }

// txAdvisoryLock: transaction mode on plain PostgreSQL through a pool: the key's advisory lock,
// held by the business transaction, and the key's row written with the outcome
// (Store.claimLocked).
type txAdvisoryLock struct{}

func (txAdvisoryLock) claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) attempt {
	return s.claimLocked(ctx, p, wait)
}

func (txAdvisoryLock) String() string { return "transaction: advisory lock" }

// txRowLock: transaction mode with Citus's statements (advisory locks are per node) or without a
// pool: the key's row inserted or taken over in the business transaction, whose row lock
// duplicates wait on (Store.claimTx).
type txRowLock struct{}

func (txRowLock) claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) attempt {
	return s.claimTx(ctx, p, wait)
}

func (txRowLock) String() string { return "transaction: row lock" }

// chooseClaimers sets t's paths for a Store whose DB is a pool (pooled) or not.
func (t *topology) chooseClaimers(pool bool) *topology {
	switch {
	case !pool:
		t.lease, t.tx = leaseOwnTx{}, txRowLock{}
	case t.kind == TopologyCitus: // advisory locks are per node: the key's row is locked instead
		t.lease, t.tx = leaseBatch{}, txRowLock{}
	default:
		t.lease, t.tx = leaseBatch{}, txAdvisoryLock{}
	}
	return t
}

// settleAttempt is where every claim's attempt ends, once: a store error is reported (the
// store_error event) and returned; a lease-mode claim whose caller left while it ran is undone
// (Store.undo); a decided claim's answer is remembered (the replay cache keeps a replay), counted
// in the key's history (a replay, a mismatch) and reported as its event. A transaction-mode
// claim whose wait ran out (a.locked) decided nothing yet: the wait loop reports the in-progress
// answer it gives up with. An uncertain answer is reported by the transition that made it
// (turnedUncertain, or the give-back of the holder), not here.
func (s *Store) settleAttempt(ctx context.Context, p *DoParams, a *attempt) error {
	switch {
	case a.err != nil:
		s.emit(ctx, Event{Kind: EventStoreError, Operation: a.c.Operation, KeyHash: a.c.hash()})
		return a.err
	case a.locked:
		return nil
	case !a.c.txMode && ctx.Err() != nil:
		s.undo(ctx, a)
		return storeError(ctx, "claim", ctx.Err())
	}
	res := a.res
	switch res.status {
	case claimUncertain:
		return nil
	case claimReplayed:
		s.countAnswer(p, EventReplayed)
	case claimKeyReused:
		s.countAnswer(p, EventKeyReused)
	}
	s.remember(p, res, a.sent)
	s.emitClaim(ctx, a.c, Event{Kind: res.status.event(), Operation: p.Operation, Start: a.sent, Attempt: attemptOf(res),
		Early: p.early && res.status == claimReplayed})
	return nil
}

// undo gives back exactly what a lease-mode attempt took when its caller left while it ran (the
// business transaction it began rolled back, the key it took released), so the key is not left
// in flight for nobody. An attempt that owns nothing has nothing to undo. The claim's statements,
// once sent, are waited for whatever the caller does (see Store.fullClaimAndBegin), which is
// what lets this know what there is to undo.
func (s *Store) undo(ctx context.Context, a *attempt) {
	s.rollback(ctx, a.tx)
	a.tx = nil
	if a.res.status.owns() {
		s.release(ctx, s.givenBack(a.c, EventReleased, "cancelled: the caller left during the claim", 0))
	}
}
