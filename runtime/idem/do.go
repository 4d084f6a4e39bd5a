package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DoParams identify a unit of work.
type DoParams struct {
	// Tenant is the key table's distribution column (see ClaimParams.Tenant); it also keeps
	// tenants' keys apart. Empty when the work has no tenant.
	Tenant      string
	Scope       string
	Key         string
	Operation   string
	Fingerprint string
	Lease       time.Duration // default 60s
	TTL         time.Duration // default 24h
	Transaction bool          // claim inside the business transaction (claim: transaction)
	Wait        time.Duration
}

// DoResult says whether fn ran and what the outcome is.
type DoResult struct {
	Outcome  *Outcome
	Replayed bool
}

// InProgressError is Do's error while another caller holds the key: errors.Is(err,
// ErrInProgress) holds, and RetryAfter (the time left on the holder's lease, at least 1s) says
// when to redeliver.
type InProgressError struct{ RetryAfter time.Duration }

func (e *InProgressError) Error() string {
	return fmt.Sprintf("%v: retry in %s", ErrInProgress, e.RetryAfter)
}

func (e *InProgressError) Unwrap() error { return ErrInProgress }

// Do runs fn at most once per key: it claims, runs fn in a transaction, completes and commits;
// a completed key returns its stored outcome with Replayed set. ErrInProgress,
// ErrFingerprintMismatch and ErrStoreUnavailable say why fn did not run. An error from fn rolls
// back and releases the key.
//
// fn may return a nil Outcome when only its side effects matter. The whole outcome is stored.
// ErrLeaseLost means fn ran but another caller took the key over (fn's lease expired), so fn's
// transaction was rolled back. With p.Transaction, duplicates wait up to p.Wait (default: the
// lease) for the first to finish; otherwise p.Wait > 0 makes them poll for that long.
func (s *Store) Do(ctx context.Context, p *DoParams, fn func(ctx context.Context, tx pgx.Tx) (*Outcome, error)) (*DoResult, error) {
	if p == nil || p.Key == "" {
		return nil, errors.New("idem: Do: an empty key cannot be made idempotent (set DoParams.Key)")
	}
	ep := &execParams{
		claim: ClaimParams{Tenant: p.Tenant, Scope: p.Scope, Key: p.Key, Operation: p.Operation, Fingerprint: p.Fingerprint,
			Lease: p.Lease, TTL: p.TTL},
		mode:     ClaimModeLease,
		wait:     p.Wait,
		allowNil: true,
	}
	if p.Transaction {
		ep.mode = ClaimModeTransaction
	}
	r, err := s.execute(ctx, ep, fn)
	if err != nil {
		return nil, err
	}
	switch r.status {
	case ClaimReplay:
		return &DoResult{Outcome: r.outcome, Replayed: true}, nil
	case ClaimInProgress:
		return nil, &InProgressError{RetryAfter: r.retryAfter}
	case ClaimMismatch:
		return nil, ErrFingerprintMismatch
	}
	return &DoResult{Outcome: r.outcome}, nil
}
