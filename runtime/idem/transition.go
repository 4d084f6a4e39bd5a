package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Every change of a key off the request's common path is a transition: a value built by one of
// the constructors below and applied by [Store.apply], which sends its statement (sql/), appends
// its history row in the same transaction, and then wakes the key's waiters and emits its event.
//
//	constructor      statement (sql/)                        history row      event
//	givenBack        uncertain_held.sql, else release.sql    uncertain, else  uncertain, else the
//	                                                         released         give-back's kind
//	rolledBack       none: the rollback undid the claim      the claim's own, the give-back's kind
//	                                                         then released
//	turnedUncertain  uncertain_abandoned.sql                 uncertain        uncertain
//	providerCalled   provider_mark.sql (UncertainOnLoss)     provider_call    provider_call
//	leaseLostBy      none: another request holds the key     lease_lost       lease_lost
//	resolved         op_resolve_completed.sql, or            resolved         resolved
//	                 op_resolve_failed.sql (in the caller's transaction: Store.ResolveTx)
//
// The claim and the completion, on every request's path, are not transitions of this kind: their
// statements and history rows go in the batches that also carry the business transaction's
// (claim*.go, biztx.go), and replays and mismatches are counted (history_write.go).
type transition struct {
	// history is the row appended, in the transaction that makes the change, when the key keeps
	// a history; its Kind names the transition.
	history HistoryEvent
	// rows are the history rows appended; history, or (rolledBack) the claim's own before it.
	rows []HistoryEvent
	row  rowID
	// stmt makes the change; "" when the change happened already (a rollback) or is only a fact
	// to record (a lost lease). A transition with a statement is made only when the statement
	// returns a row; otherwise orElse is tried, in the same transaction.
	stmt   string
	args   []any
	orElse *transition
	// keep says the key keeps a history (DoParams.History or UncertainOnLoss): rows are appended.
	keep bool
	// sync: the transaction waits for its flush to disk whatever the session's setting (a
	// provider call must be recorded before the provider is called).
	sync bool
	// event is what the Observer is told once it is made; notify wakes the key's waiters then.
	event  Event
	notify bool
	// c is the claim the transition gives back or records for; nil for one a claim found to make
	// (turnedUncertain) or an operator's (resolved).
	c *Claim
	// historySQL and historyArgs append the history row instead of appendHistory's statement,
	// for a row with a column only it has (resolved: the resolution).
	historySQL  string
	historyArgs []any
}

// uncertain says t turned the key uncertain.
func (t *transition) uncertain() bool { return t != nil && t.history.Kind == EventUncertain }

// givenBack is the give-back of c's key after its work rolled back in lease mode, reported as
// kind (EventReleased, EventHandlerTimeout, EventHandlerFailed), why its history's reason: the
// row is deleted (sql/release.sql), fenced by c's token and the row still in flight, or, under
// UncertainOnLoss, turned uncertain when c recorded a provider call (sql/uncertain_held.sql).
func (s *Store) givenBack(c *Claim, kind EventKind, why string, ran time.Duration) *transition {
	rel := &transition{history: c.event(EventReleased), row: c.row, stmt: s.sql.release, args: c.args(), keep: c.history,
		event:  Event{Kind: kind, Operation: c.Operation, Duration: ran, Attempt: c.Attempt},
		notify: true, c: c}
	rel.history.Detail = why
	if !c.uncertainOnLoss {
		return rel
	}
	unc := &transition{history: c.event(EventUncertain), row: c.row, stmt: s.sql.uncertainHeld, args: c.args(), keep: true,
		event: Event{Kind: EventUncertain, Operation: c.Operation, Attempt: c.Attempt}, notify: true, c: c, orElse: rel}
	unc.history.Detail = fmt.Sprintf("attempt %d lost after a provider call: %s", c.Attempt, why)
	return unc
}

// whyAbandoned is the reason of a claim given back because its answer was lost: the claim may
// or may not have been made.
const whyAbandoned = "abandoned: the claim's answer was lost, and the key given back"

// rolledBack is the give-back of c's key in transaction mode: the rollback of the business
// transaction undid the claim, and notified nobody. The history gets the claim's own row (written
// with the completion, which never came) and the released row.
func (s *Store) rolledBack(c *Claim, kind EventKind, why string, ran time.Duration) *transition {
	t := &transition{history: c.event(EventReleased), row: c.row, keep: c.history,
		event: Event{Kind: kind, Operation: c.Operation, Duration: ran, Attempt: c.Attempt}, notify: true, c: c}
	t.history.Detail = why
	t.rows = []HistoryEvent{c.event(c.claimKind()), t.history}
	return t
}

// turnedUncertain is the transition a claim makes when it finds the key in flight, its holder's
// lease run out after a provider call (res.abandoned): the row turns uncertain, fenced by the
// holder's attempt (sql/uncertain_abandoned.sql).
func (s *Store) turnedUncertain(p *DoParams, res *claimResult) *transition {
	row := rowOf(p)
	return &transition{
		history: HistoryEvent{Kind: EventUncertain, Operation: p.Operation, Attempt: int(res.rowAttempt),
			Detail: fmt.Sprintf("lease of attempt %d expired after a provider call", res.rowAttempt)},
		row: row, stmt: s.sql.uncertainAbandoned, args: []any{row.tenant, row.scope, row.key, res.rowAttempt}, keep: true,
		event: Event{Kind: EventUncertain, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key), Attempt: int(res.rowAttempt)},
	}
}

// providerCalled records c's call to a provider before the provider key is handed out: the
// history's provider_call row, in a transaction that waits for its flush, and under
// UncertainOnLoss the row's mark (sql/provider_mark.sql), fenced by c's token: not made when the
// claim was taken over.
func (s *Store) providerCalled(c *Claim, call ProviderCall, key string) *transition {
	t := &transition{history: c.event(EventProviderCall), row: c.row, keep: true, sync: true, c: c,
		event: Event{Kind: EventProviderCall, Operation: c.Operation, Attempt: c.Attempt}}
	t.history.Provider, t.history.ProviderKey, t.history.Amount, t.history.Currency = call.Provider, key, call.Amount, call.Currency
	if c.uncertainOnLoss {
		t.stmt, t.args = s.sql.providerMark, c.args()
	}
	return t
}

// leaseLostBy records that c found its claim taken over by another request.
func (s *Store) leaseLostBy(c *Claim) *transition {
	return &transition{history: c.event(EventLeaseLost), row: c.row, keep: c.history, c: c,
		event: Event{Kind: EventLeaseLost, Operation: c.Operation, Attempt: c.Attempt}}
}

// resolved settles the uncertain key row (its operation as stored) as p says, in the caller's
// transaction, which has locked the row and found it uncertain (Store.ResolveTx).
func (s *Store) resolved(row rowID, operation string, p *ResolveParams) (*transition, error) {
	t := &transition{row: row, keep: true,
		history: HistoryEvent{Kind: EventResolved, Operation: fromStoredText(operation), Detail: p.Evidence, Actor: p.Actor, Resolution: p.As},
		event:   Event{Kind: EventResolved, Operation: fromStoredText(operation)}}
	switch p.As {
	case ResolveCompleted:
		var headers any
		if len(p.Outcome.Header) > 0 {
			b, err := encodeStoredHeaders(p.Outcome.Header)
			if err != nil {
				return nil, fmt.Errorf("encode headers: %w", err)
			}
			headers = b
		}
		var ref *string
		if p.Outcome.Reference != "" {
			ref = &p.Outcome.Reference
		}
		t.history.Status = p.Outcome.Status
		t.stmt, t.args = s.sql.op.resolveCompleted, []any{row.tenant, row.scope, row.key,
			int32(p.Outcome.Status), headers, p.Outcome.Body, ref, interval(orDefault(p.TTL, DefaultTTL))}
	case ResolveFailed:
		t.stmt, t.args = s.sql.op.resolveFailed, []any{row.tenant, row.scope, row.key}
	}
	t.historySQL, t.historyArgs = s.sql.op.resolveHistory, []any{row.tenant, row.scope, row.key, operation,
		int32(t.history.Status), p.Evidence, p.Actor, p.As.String()}
	return t, nil
}

// apply makes t, or, when t's statement changes no row, the first of its orElse chain that
// does, and returns the transition made (nil when none was). Once made, the key's waiters are
// woken and the Observer is told.
func (s *Store) apply(ctx context.Context, t *transition) (*transition, error) {
	made, err := s.write(ctx, t)
	return s.made(ctx, made, err)
}

// applyIn is apply inside the caller's transaction tx: if tx is rolled back, so is the change.
func (s *Store) applyIn(ctx context.Context, tx pgx.Tx, t *transition) (*transition, error) {
	made, err := s.writeIn(ctx, tx, t)
	return s.made(ctx, made, err)
}

// made tells of a transition once made: the key's waiters are woken and the Observer is told.
func (s *Store) made(ctx context.Context, made *transition, err error) (*transition, error) {
	if err != nil || made == nil {
		return nil, err
	}
	if made.notify {
		s.notifyWaiters(ctx, made.c)
	}
	if e := made.event; s.cfg.Observer != nil || s.log.Enabled(ctx, eventLevel(e.Kind)) {
		if e.KeyHash == "" {
			e.KeyHash = made.keyHash()
		}
		s.emit(ctx, e)
	}
	return made, nil
}

// keyHash is the hash of t's key, as logs and events print it.
func (t *transition) keyHash() string {
	if t.c != nil {
		return t.c.hash()
	}
	return KeyHash(fromStoredText(t.row.scope), fromStoredText(t.row.key))
}

// write sends t's statements and history rows: a bare statement on the pool when nothing else
// goes with it, otherwise one transaction.
func (s *Store) write(ctx context.Context, t *transition) (*transition, error) {
	switch {
	case t.stmt != "" && !t.keep && !t.sync && t.orElse == nil:
		n, err := s.returned(ctx, t.stmt, t.args...)
		if err != nil || n == 0 {
			return nil, err
		}
		return t, nil
	case t.stmt == "" && !t.sync:
		if !t.keep {
			return t, nil
		}
		return t, s.appendHistory(ctx, s.db, t.row, t.historyRows()...)
	}
	var made *transition
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) (err error) {
		made, err = s.writeIn(ctx, tx, t)
		return err
	})
	if err != nil {
		return nil, err
	}
	return made, nil
}

// writeIn sends t's statements and history rows in tx.
func (s *Store) writeIn(ctx context.Context, tx pgx.Tx, t *transition) (*transition, error) {
	if t.sync {
		for _, q := range s.set().syncCommit() {
			if _, err := tx.Exec(ctx, q); err != nil {
				return nil, err
			}
		}
	}
	for cand := t; cand != nil; cand = cand.orElse {
		if cand.stmt != "" {
			n, err := txReturned(ctx, tx, cand.stmt, cand.args...)
			if err != nil {
				return nil, err
			}
			if n == 0 {
				continue
			}
		}
		switch {
		case !cand.keep:
		case cand.historySQL != "":
			if _, err := tx.Exec(ctx, cand.historySQL, cand.historyArgs...); err != nil {
				return nil, fmt.Errorf("idem: history: %w", err)
			}
		default:
			if err := s.appendHistory(ctx, tx, cand.row, cand.historyRows()...); err != nil {
				return nil, err
			}
		}
		return cand, nil
	}
	return nil, nil
}

// historyRows are the rows t appends.
func (t *transition) historyRows() []HistoryEvent {
	if t.rows != nil {
		return t.rows
	}
	return []HistoryEvent{t.history}
}

// record applies t, a transition that only records a fact already true (a lost lease, a
// transaction-mode rollback): bounded by Config.StoreTimeout however the caller's context ends,
// and a failure to record is logged, never changing the request's answer.
func (s *Store) record(ctx context.Context, t *transition) {
	rctx, bound := newBound(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer bound.end()
	if _, err := s.apply(rctx, t); err != nil {
		s.log.WarnContext(ctx, "idem: could not append to the key's history", "event", string(t.history.Kind),
			"operation", t.history.Operation, "key_hash", t.keyHash(), "error", err)
	}
}
