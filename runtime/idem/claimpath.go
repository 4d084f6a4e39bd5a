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
// The statement set (plain or Citus's) is the topology's: a path sends the same statements
// either way, but for the guards Citus's set leaves out (topology.go).
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
	case t.citus:
		t.lease, t.tx = leaseBatch{}, txRowLock{}
	default:
		t.lease, t.tx = leaseBatch{}, txAdvisoryLock{}
	}
	return t
}
