package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// ClaimMode is when the claim is made: x-idempotency's claim field, lease or transaction.
type ClaimMode int

const (
	// ClaimLease (the default) commits the claim at once, before the handler runs; a concurrent
	// duplicate is told the key is in progress (or, with a wait, polls for the outcome).
	ClaimLease ClaimMode = iota + 1
	// ClaimTransaction makes the claim inside the business transaction; a concurrent duplicate
	// waits, bounded, for that transaction to end and then replays its outcome.
	ClaimTransaction
)

func (m ClaimMode) String() string {
	switch m {
	case ClaimLease:
		return "lease"
	case ClaimTransaction:
		return "transaction"
	}
	return fmt.Sprintf("ClaimMode(%d)", int(m))
}

// Outcome is what a completed request answered: what is stored, and what a replay returns.
type Outcome struct {
	Status    int
	Header    http.Header // stored as given
	Body      []byte
	Reference string // a resource reference (reference storage), reloaded on replay
}

// HandlerFunc is the work done at most once per key. It runs inside tx, the transaction that
// also stores its outcome: every business write goes through tx, so the write and the stored
// outcome commit together or not at all. It must neither commit nor roll back tx.
type HandlerFunc func(ctx context.Context, tx pgx.Tx) (*Outcome, error)

// DoParams identify one unit of work for Do.
type DoParams struct {
	// Tenant is the key table's distribution column: every statement about the key names it, so
	// on Citus the key stays on the tenant's shard, and tenants never share keys. Empty when the
	// work has no tenant.
	Tenant string
	// Scope is what Key is unique within, besides the tenant (for example the queue's name).
	Scope string
	// Key identifies the unit of work (a message id, an Idempotency-Key). An empty Key is an
	// error unless AllowNoKey is set.
	Key string
	// AllowNoKey runs fn in a plain transaction, without idempotency, when Key is empty: an
	// operation whose key is optional.
	AllowNoKey bool
	// Operation names the work in logs and events (an operationId).
	Operation string
	// Fingerprint is a digest of the request (see Fingerprinter). The same key with another
	// fingerprint is refused with ErrKeyReused, also while the first is in flight.
	Fingerprint string
	// Lease is how long a claim is held before another caller may take it over; it is renewed
	// while fn runs. Default DefaultLease.
	Lease time.Duration
	// Timeout bounds fn: past it, fn's context is cancelled (with cause ErrHandlerTimeout), its
	// statement in progress is cancelled on the server, its transaction rolled back and the key
	// released, and Do returns ErrHandlerTimeout. The lease is no longer renewed past it, so a
	// handler that ignores its context cannot keep the key either. Default: the lease.
	Timeout time.Duration
	// TTL is how long a completed key is remembered: at least TTL after it completes, and at
	// most Timeout longer (its expiry is set at the claim, for the latest the handler can
	// finish, so that the completion need not move it). Default DefaultTTL.
	TTL time.Duration
	// Claim is the claim mode; zero means ClaimLease.
	Claim ClaimMode
	// Wait bounds how long a duplicate waits for a concurrent holder to finish. ClaimLease:
	// zero answers ErrInProgress at once; ClaimTransaction: zero means up to the lease.
	Wait time.Duration
	// Persist says which outcome statuses are stored; an outcome outside it is rolled back and
	// its key released, as if fn had failed, but returned. The zero set stores every outcome.
	Persist StatusSet
	// History appends what happens to the key to its durable history (Store.History): claims,
	// takeovers, completions, releases and why, replays (counted), mismatches, lost leases,
	// provider calls. Off by default: it costs a write per first execution.
	History bool
	// UncertainOnLoss declares that fn's provider calls cannot be safely repeated: once fn has
	// asked for a provider key (ProviderKey), losing the claim (a crash, a timeout, an error, a
	// lost lease) turns the key uncertain (ErrUncertain) instead of letting a retry run fn again,
	// until Store.Resolve settles it. It needs ClaimLease, and implies History.
	UncertainOnLoss bool

	// early marks the params of a claim made ahead (ClaimAhead): its replay is reported Early.
	early bool
}

// DoResult is what Do decided.
type DoResult struct {
	// Outcome is fn's answer (Replayed false) or the stored one (Replayed true).
	Outcome *Outcome
	// Replayed says the key was completed before and fn did not run.
	Replayed bool
	// Persisted says fn ran and its outcome was committed with its work; false when fn's
	// status is outside DoParams.Persist or the key was empty (AllowNoKey).
	Persisted bool
}

// InProgressError is Do's error while another caller holds the key: errors.Is(err,
// ErrInProgress) holds, and RetryAfter says when to try again.
type InProgressError struct{ RetryAfter time.Duration }

func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v: retry in %s", ErrInProgress, e.RetryAfter)
}

func (e *InProgressError) Unwrap() error { return ErrInProgress }

// Do runs fn at most once per (Tenant, Scope, Key): it claims the key, runs fn in a
// transaction, and stores fn's outcome in that same transaction before committing. A key
// completed before returns its stored outcome with Replayed set, and fn does not run.
//
// Errors say why fn did not run or did not commit: *InProgressError (ErrInProgress) while
// another caller holds the key; ErrKeyReused for the same key with another fingerprint;
// ErrStoreUnavailable when the store cannot be reached (fn never runs without a claim);
// ErrLeaseLost when fn ran but its lease was taken over meanwhile, so its work was rolled back;
// ErrUncertain when an earlier attempt of an UncertainOnLoss operation was lost after a provider
// call (the key waits for Store.Resolve; fn does not run), and an error before any claim for
// UncertainOnLoss with ClaimTransaction.
// fn's own error, a panic or a cancelled ctx rolls the work back and releases the key, so a
// later call runs fn anew; fn's error is returned as it is, unless the database connection was
// lost under fn: then it is wrapped with ErrStoreUnavailable (errors.Is finds both).
//
// fn may return a nil Outcome when only its side effects matter; an empty outcome is stored.
func (s *Store) Do(ctx context.Context, p *DoParams, fn HandlerFunc) (*DoResult, error) {
	if p == nil {
		return nil, errors.New("idem: Do: params are nil")
	}
	if p.UncertainOnLoss && p.Claim == ClaimTransaction {
		// The claim of transaction mode is durable only with the business transaction's commit: a
		// crashed holder leaves no row to carry the provider call's mark, and a retry would run
		// the handler again as if nothing had happened.
		return nil, errors.New("idem: Do: UncertainOnLoss needs ClaimLease: a transaction-mode claim is not durable until its commit, so a crash after a provider call would leave nothing on the key that records the call")
	}
	if p.Key == "" {
		if !p.AllowNoKey {
			return nil, errors.New("idem: Do: an empty key cannot be made idempotent (set DoParams.Key, or AllowNoKey for an optional key)")
		}
		return s.doWithoutKey(ctx, p, fn)
	}
	var c claimed
	if a := s.takeAhead(ctx, p); a != nil {
		c = a.claimed // claimed ahead (ClaimAhead): its claim is this call's
	} else {
		if r, hit, err := s.cached(ctx, p); hit {
			return r, err
		}
		c = s.claimFor(ctx, p)
	}
	r, err := s.runOwned(ctx, c, p, fn)
	if err != nil {
		s.logGoneCaller(ctx, p, err)
		return nil, err
	}
	switch r.status {
	case claimReplayed:
		return &DoResult{Outcome: r.outcome, Replayed: true}, nil
	case claimInProgress:
		return nil, &InProgressError{RetryAfter: r.retryAfter}
	case claimKeyReused:
		return nil, ErrKeyReused
	case claimUncertain:
		return nil, ErrUncertain
	}
	return &DoResult{Outcome: r.outcome, Persisted: r.persisted}, nil
}

// doWithoutKey runs fn in a plain transaction, committed when its status is persisted.
func (s *Store) doWithoutKey(ctx context.Context, p *DoParams, fn HandlerFunc) (*DoResult, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer s.rollback(ctx, tx) // a no-op after Commit; undoes the work on error or panic
	hctx, cancelTimeout := s.boundHandler(ctx, timeout(p))
	defer cancelTimeout()
	out, err := fn(hctx, tx.Tx)
	if finishHandler(hctx, cancelTimeout) {
		return nil, s.handlerTimedOut(ctx, p.Operation, "", timeout(p), 0, false)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if lost := s.handlerLostStore(ctx, tx.Tx, p.Operation, "", err); lost != nil {
			return nil, lost
		}
		return nil, err
	}
	if out == nil {
		out = &Outcome{}
	}
	if !p.Persist.IsEmpty() && !p.Persist.Contains(out.Status) {
		return &DoResult{Outcome: out}, nil // rolled back by the deferred call
	}
	if err := s.commit(ctx, tx); err != nil {
		return nil, err
	}
	return &DoResult{Outcome: out}, nil
}

// logGoneCaller notes, at Info, a request whose own context ended (an HTTP client that
// disconnected, a consumer shutting down): nothing went wrong in the store or the handler, so it
// is neither a warning nor an error. It says only that: whether a key was claimed and given back
// is told by its own event (EventReleased), since a caller can leave before its claim, during it
// or while its handler runs.
func (s *Store) logGoneCaller(ctx context.Context, p *DoParams, err error) {
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
		return
	}
	s.log.InfoContext(ctx, "idem: client went away before its request completed; nothing of its work was kept",
		"operation", p.Operation, "key_hash", KeyHash(p.Scope, p.Key), "cause", context.Cause(ctx))
}
