package idem

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// ProviderKey is the idempotency key to send with call to its provider, for the request whose
// handler runs under ctx: Derivation.Key(call.Provider) of the claim's Derivation, the same on
// every attempt, takeover and job run of the request.
//
// For an operation that keeps a history (DoParams.History) or is declared uncertain-on-loss
// (DoParams.UncertainOnLoss), the call is recorded before the key is returned, durably and
// outside the business transaction (so a crash cannot roll the record back): a provider_call
// row in the key's history, with the derived key, amount and currency reconciliation matches
// against the provider's records. Under UncertainOnLoss the key's row is also marked, so that a
// lost claim turns the key uncertain instead of running the handler again. Call it right before
// the provider call, once per call; a call with the same provider again records again.
//
// It fails with ErrLeaseLost when the claim was taken over (do not call the provider: another
// request holds the key), with ErrStoreUnavailable when the record could not be written (do not
// call the provider either: the call would not be known), and outside a handler run by Do or
// generated code.
func ProviderKey(ctx context.Context, call ProviderCall) (string, error) {
	if call.Provider == "" {
		return "", errors.New("idem: ProviderKey: the provider's name is required")
	}
	c, ok := ClaimFromContext(ctx)
	if !ok {
		return "", errors.New("idem: ProviderKey: no claim in ctx: call it from a handler run by Do or by generated code")
	}
	key := c.Derivation().Key(call.Provider)
	if !c.history || c.store == nil {
		return key, nil
	}
	if err := c.store.recordProviderCall(ctx, c, call, key); err != nil {
		return "", err
	}
	return key, nil
}

// recordProviderCall applies c's providerCalled transition, bounded by the store timeout: the
// provider_call history row and, under UncertainOnLoss, the row's mark, committed before the
// provider is called. A mark fenced out (zero rows) means the claim was taken over:
// ErrLeaseLost.
func (s *Store) recordProviderCall(ctx context.Context, c *Claim, call ProviderCall, key string) error {
	var made *transition
	err := s.bounded(ctx, 0, func(ctx context.Context) (err error) {
		made, err = s.apply(ctx, s.providerCalled(c, call, key))
		return err
	})
	switch {
	case err != nil:
		s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
		if !errors.Is(err, ErrStoreUnavailable) {
			err = fmt.Errorf("%w: %w", ErrStoreUnavailable, err)
		}
		return fmt.Errorf("idem: ProviderKey: recording the provider call: %w", err)
	case made == nil:
		s.record(ctx, s.leaseLostBy(c))
		return fmt.Errorf("idem: ProviderKey: %w: do not call the provider (operation %s)", ErrLeaseLost, c.Operation)
	}
	atomic.StoreInt32(&c.providerCalled, 1)
	return nil
}

// syncCommitSQL makes recordProviderCall's transaction wait for its flush to disk.
const syncCommitSQL = `SET LOCAL synchronous_commit = on`

// uncertainError is the error of a run that failed after its claim recorded a provider call
// under UncertainOnLoss (a handler error, a timeout, an aborted transaction): the key is
// uncertain now, since a release never deletes a row marked by ProviderKey. errors.Is holds for
// ErrUncertain and for the run's own error, so the caller is told the truth (an HTTP server
// answers 409 operation-uncertain, not a 500 saying nothing changed).
type uncertainError struct{ err error }

func (e *uncertainError) Error() string {
	return "idem: the attempt failed after a provider call, so its outcome is uncertain: " + e.err.Error()
}

func (e *uncertainError) Unwrap() []error { return []error{ErrUncertain, e.err} }

// lostAfterCall is err, or err as an uncertainError when c recorded a provider call under
// UncertainOnLoss.
func lostAfterCall(c *Claim, err error) error {
	if err != nil && c.uncertainOnLoss && atomic.LoadInt32(&c.providerCalled) == 1 {
		return &uncertainError{err}
	}
	return err
}
