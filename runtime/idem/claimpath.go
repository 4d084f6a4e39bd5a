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
type claimer interface {
	// claim makes one claim of p's key. tx is the business transaction when the claim began it
	// (the caller owns it when res owns the key, and ends it otherwise). wait bounds a
	// transaction-mode claim's wait on a holder; locked says that wait ran out.
	claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) (tx *bizTx, res *claimResult, locked bool, err error)
	// String names the path, for logs and tests.
	String() string
}

// leaseBatch: lease mode when the Store holds the connection. The fast claim and, for a key that
// has a row, the full claim, each in one round trip that also begins the business transaction
// when the claim is this request's (Store.claimAndBegin).
type leaseBatch struct{}

func (leaseBatch) claim(ctx context.Context, s *Store, p *DoParams, _ time.Duration) (*bizTx, *claimResult, bool, error) {
	tx, res, err := s.claimAndBegin(ctx, p)
	return tx, res, false, err
}

func (leaseBatch) String() string { return "lease: claim and begin" }

// leaseOwnTx: lease mode on a DB that is not a pool: the claim in a transaction of its own
// (Store.claim); the caller begins the business transaction.
type leaseOwnTx struct{}

func (leaseOwnTx) claim(ctx context.Context, s *Store, p *DoParams, _ time.Duration) (*bizTx, *claimResult, bool, error) {
	res, err := s.claim(ctx, p)
	return nil, res, false, err
}

func (leaseOwnTx) String() string { return "lease: own transaction" }

// txAdvisoryLock: transaction mode on plain PostgreSQL through a pool: the key's advisory lock,
// held by the business transaction, and the key's row written with the outcome
// (Store.claimLocked).
type txAdvisoryLock struct{}

func (txAdvisoryLock) claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) (*bizTx, *claimResult, bool, error) {
	return s.claimLocked(ctx, p, wait)
}

func (txAdvisoryLock) String() string { return "transaction: advisory lock" }

// txRowLock: transaction mode with Citus's statements (advisory locks are per node) or without a
// pool: the key's row inserted or taken over in the business transaction, whose row lock
// duplicates wait on (Store.claimTx).
type txRowLock struct{}

func (txRowLock) claim(ctx context.Context, s *Store, p *DoParams, wait time.Duration) (*bizTx, *claimResult, bool, error) {
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

// settleClaim is where every claim path's decided attempt ends: the answer is remembered (the
// replay cache keeps a replay) and reported as its event. One place, so that a new outcome of a
// claim is added once.
//
// An uncertain answer is reported by the transition that made it (settleUncertain), not here.
// A replay and a mismatch are counted in the key's history (countAnswer).
func (s *Store) settleClaim(ctx context.Context, p *DoParams, c *Claim, res *claimResult, sent time.Time) {
	switch res.status {
	case claimUncertain:
		return
	case claimReplayed:
		s.countAnswer(p, EventReplayed)
	case claimKeyReused:
		s.countAnswer(p, EventKeyReused)
	}
	s.remember(p, res, sent)
	s.emitClaim(ctx, c, Event{Kind: res.status.event(), Operation: p.Operation, Start: sent, Attempt: attemptOf(res)})
}

// claimFailed reports a claim that failed with a store error (the store_error event).
func (s *Store) claimFailed(ctx context.Context, c *Claim) {
	s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
}

// undoIfGone undoes a lease-mode claim whose caller left while it ran, and says so: exactly what
// the claim did is given back (the business transaction it began rolled back, the key it took
// released), so the key is not left in flight for nobody. A claim that owns nothing has nothing
// to undo. The claim's statements, once sent, are waited for whatever the caller does (see
// Store.fullClaimAndBegin), which is what lets this know what there is to undo.
func (s *Store) undoIfGone(ctx context.Context, c *Claim, tx *bizTx, res *claimResult) bool {
	if ctx.Err() == nil {
		return false
	}
	if res.status.owns() {
		if tx != nil {
			s.rollback(ctx, tx)
		}
		c.why = "cancelled: the caller left during the claim"
		s.release(ctx, c, EventReleased, 0)
	}
	return true
}
