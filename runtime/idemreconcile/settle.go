package idemreconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// settle settles the uncertain keys the records decided, when Opts.Resolve asks: the charged
// ones as completed (with Settle's outcome; without Settle they stay discrepancies), the others
// as failed. A key settled is no discrepancy; one whose resolution fails is, with the error.
func (r *run) settle(ctx context.Context) {
	for _, c := range r.candidates {
		charged := c.d.Kind == UncertainCharged
		if !r.o.Resolve || (charged && r.o.Settle == nil) {
			r.add(c.d)
			continue
		}
		ev := r.evidence(c)
		var err error
		as := idem.ResolveFailed
		if charged {
			as, err = idem.ResolveCompleted, r.settleCharged(ctx, c, ev)
		} else {
			side := c.d.Ours
			err = r.store.Resolve(ctx, &idem.ResolveParams{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key,
				As: idem.ResolveFailed, Actor: r.o.Actor, Evidence: ev})
		}
		if err != nil {
			c.d.Error = err.Error()
			r.add(c.d)
			continue
		}
		r.rep.Resolved = append(r.rep.Resolved, Resolved{Discrepancy: c.d, As: as.String(), Evidence: ev})
		if charged {
			r.rep.Matched++
		}
	}
}

// settleCharged settles a charged uncertain key as completed: Settle's business row and the
// key's resolution commit together, or neither does.
func (r *run) settleCharged(ctx context.Context, c candidate, evidence string) error {
	side, rec := c.d.Ours, c.d.Theirs[0]
	key := UncertainKey{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key, Operation: side.Operation, KeyHash: side.KeyHash,
		Provider: side.Provider, ProviderKey: c.d.ProviderKey, Amount: side.Amount, Currency: side.Currency, At: side.At}
	return pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		out, err := r.o.Settle(ctx, tx, key, rec)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		if out == nil {
			return errors.New("settle returned no outcome for retries to replay")
		}
		return r.store.ResolveTx(ctx, tx, &idem.ResolveParams{Tenant: side.Tenant, Scope: side.Scope, Key: side.Key,
			As: idem.ResolveCompleted, Outcome: out, TTL: r.o.TTL, Actor: r.o.Actor, Evidence: evidence})
	})
}
