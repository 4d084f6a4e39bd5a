package idem

import (
	"context"
	"errors"
	"fmt"
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

// recordProviderCall writes the provider_call history row for c and, under uncertainOnLoss,
// marks c's row (provider_at, and an expiry that never comes until the key is settled), in one
// transaction on the pool that commits synchronously, before the provider is called. The mark
// is fenced by c's token: zero rows marked means the claim was taken over (ErrLeaseLost).
func (s *Store) recordProviderCall(ctx context.Context, c *Claim, call ProviderCall, key string) error {
	return fmt.Errorf("idem: ProviderKey: recording a provider call is not implemented yet: %w", ErrStoreUnavailable)
}
