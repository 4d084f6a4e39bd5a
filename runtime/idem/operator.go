package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The operator's side of the store: a key's history, the keys that are gone, the provider calls
// reconciliation compares with a provider's records (runtime/idemreconcile), and resolve
// (resolve.go). Nothing here is on the request path; the statements live in sql/op_*.sql.

// opStatements are the operator's statements, rendered per Store (see newStatements).
type opStatements struct {
	resolveLock, resolveCompleted, resolveFailed, resolveHistory string
	history, goneKeys                                            string
	providerCalls, providerCallsByKey, keyFates, keyRows         string
	keys, clock, keyStats                                        string // inspect.go
}

// MaxHistoryRows caps what History returns: the oldest rows of a key with more are left out.
const MaxHistoryRows = 1000

// History returns the history of the key (tenant, scope and key as KeyInfo gives them), oldest
// first. A key with no history (its operation keeps none, or it is older than the retention)
// has an empty one. It is an operator's read, sent with the simple protocol: planned with its
// values, so Citus routes it to the key's shard even where sessions force generic plans, which
// Citus cannot make of it.
func (s *Store) History(ctx context.Context, tenant, scope, key string) ([]HistoryEvent, error) {
	rows, err := s.db.Query(ctx, s.sql.op.history, pgx.QueryExecModeSimpleProtocol,
		storedText(tenant), storedText(scope), storedText(key), MaxHistoryRows)
	if err != nil {
		return nil, fmt.Errorf("idem: history: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryEvent, error) {
		var ev HistoryEvent
		var at pgtype.Timestamptz
		var kind, op, resolution string
		var attempt, status, replays int32
		err := r.Scan(&at, &kind, &op, &attempt, &status, &ev.Detail, &ev.Actor, &replays, &ev.Provider,
			&ev.ProviderKey, &ev.Amount, &ev.Currency, &resolution)
		ev.At, ev.Kind, ev.Operation = at.Time, EventKind(kind), fromStoredText(op)
		ev.Attempt, ev.Status, ev.Replays = int(attempt), int(status), int(replays)
		if resolution != "" {
			ev.Resolution, _ = ParseResolution(resolution) // a value this version does not know stays zero
		}
		return ev, err
	})
}

// GoneKeys finds the keys [Store.LookupKey] would find for p (Key or KeyHash, Tenant, Operation)
// that have no row any more — released after a failure so that a retry runs anew, resolved as
// failed, or expired and purged — but whose history is kept (Config.HistoryRetention, longer
// than the key), so that a dispute about a key that is gone can still be read. Each has State
// KeyGone, its tenant, scope, key, hash and operation, and CreatedAt the time of its oldest
// history row; [Store.History] gives the rest. It returns none for an operation that keeps no
// history. The history table is indexed by tenant first: without a Tenant, it is scanned.
func (s *Store) GoneKeys(ctx context.Context, p *LookupKeyParams) ([]KeyInfo, error) {
	if p == nil {
		p = &LookupKeyParams{}
	}
	// nil leaves a condition out (sql/op_gone_keys.sql).
	var key, hash, tenant, operation *string
	switch {
	case p.Key != "" && p.KeyHash != "":
		return nil, errors.New("idem: GoneKeys: give Key or KeyHash, not both")
	case p.Key != "":
		key = ptr(storedText(p.Key))
	case p.KeyHash != "":
		h, err := ParseKeyHash(p.KeyHash)
		if err != nil {
			return nil, err
		}
		hash = &h
	default:
		return nil, errors.New("idem: GoneKeys: Key or KeyHash is required")
	}
	if p.Tenant != nil {
		tenant = ptr(storedText(*p.Tenant))
	}
	if p.Operation != "" {
		operation = ptr(storedText(p.Operation))
	}
	rows, err := s.db.Query(ctx, s.sql.op.goneKeys, pgx.QueryExecModeSimpleProtocol, key, hash, tenant, operation, MaxLookupRows)
	if err != nil {
		return nil, storeError(ctx, "gone keys", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyInfo, error) {
		k := KeyInfo{State: KeyGone}
		err := r.Scan(&k.Tenant, &k.Scope, &k.Key, &k.Operation, &k.CreatedAt)
		k.Tenant, k.Scope, k.Key, k.Operation = fromStoredText(k.Tenant), fromStoredText(k.Scope), fromStoredText(k.Key), fromStoredText(k.Operation)
		k.KeyHash = KeyHash(k.Scope, k.Key)
		return k, err
	})
}

func ptr[T any](v T) *T { return &v }

// ProviderCallsParams select the provider calls [Store.ProviderCalls] and
// [Store.EachProviderCall] read: those with the derived keys ProviderKeys when it is set, else
// those of the window.
type ProviderCallsParams struct {
	// From and To bound the window [From, To) of the calls' times.
	From, To time.Time
	// Providers keeps the window's calls to these providers; nil or empty keeps every provider's.
	Providers []string
	// ProviderKeys, when set, selects the calls with these derived keys (ProviderKey) instead,
	// whenever they were made and whatever their provider: the calls a provider's records name.
	ProviderKeys []string
}

// ProviderCallEvent is a provider call of a key's history, with what became of the key since.
type ProviderCallEvent struct {
	// Tenant, Scope, Key and Operation are the key as the runtime's callers gave them.
	Tenant, Scope, Key, Operation string
	KeyHash                       string
	At                            time.Time
	// Provider, ProviderKey, Amount and Currency are as ProviderKey recorded them (Amount 0 and
	// Currency "" when the handler did not say what the call moved).
	Provider, ProviderKey string
	Amount                int64
	Currency              string
	// Fate is what became of the key: filled by ProviderCalls and ReadFates, not by
	// EachProviderCall.
	Fate KeyFate
}

// KeyFate is what became of a key: the last of its history's completions, releases, turns to
// uncertain and resolutions, and its row, while it has one.
type KeyFate struct {
	// Last is EventCompleted, EventReleased, EventUncertain, EventResolved, or "" when the
	// history has none of them. Status is its status (completed; resolved as completed), and
	// Resolution how a resolved key was settled.
	Last       EventKind
	Status     int
	Resolution Resolution
	// State is the key row's state, KeyGone when the key has no row; RowStatus its stored status.
	State     KeyState
	RowStatus int
}

// ProviderCalls returns the provider calls p selects, by derived key and time, each with its
// key's fate: reconciliation's read of our side (runtime/idemreconcile), for a batch of derived
// keys. It reads outside any transaction: a key that changes meanwhile shows the state of one of
// the statements.
func (s *Store) ProviderCalls(ctx context.Context, p *ProviderCallsParams) ([]ProviderCallEvent, error) {
	var calls []ProviderCallEvent
	if err := s.EachProviderCall(ctx, p, func(c ProviderCallEvent) error {
		calls = append(calls, c)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := s.ReadFates(ctx, calls); err != nil {
		return nil, err
	}
	return calls, nil
}

// EachProviderCall calls fn with each provider call p selects, by derived key and time (the
// calls of one derived key come together), as the rows arrive: memory does not grow with the
// window. Their Fate is left zero (see ReadFates). fn's error ends it and is returned.
func (s *Store) EachProviderCall(ctx context.Context, p *ProviderCallsParams, fn func(ProviderCallEvent) error) error {
	if p == nil {
		return nil
	}
	var rows pgx.Rows
	var err error
	switch {
	case p.ProviderKeys != nil:
		rows, err = s.db.Query(ctx, s.sql.op.providerCallsByKey, p.ProviderKeys)
	case !p.From.Before(p.To):
		return nil
	default:
		providers := p.Providers
		if providers == nil {
			providers = []string{}
		}
		rows, err = s.db.Query(ctx, s.sql.op.providerCalls, p.From, p.To, providers)
	}
	if err != nil {
		return storeError(ctx, "provider calls", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c ProviderCallEvent
		if err := rows.Scan(&c.Tenant, &c.Scope, &c.Key, &c.At, &c.Operation, &c.Provider, &c.ProviderKey, &c.Amount, &c.Currency); err != nil {
			return storeError(ctx, "provider calls", err)
		}
		c.Tenant, c.Scope, c.Key, c.Operation = fromStoredText(c.Tenant), fromStoredText(c.Scope), fromStoredText(c.Key), fromStoredText(c.Operation)
		c.KeyHash = KeyHash(c.Scope, c.Key)
		if err := fn(c); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return storeError(ctx, "provider calls", err)
	}
	return nil
}

// ReadFates fills the Fate of calls (as EachProviderCall gives them) from their keys' history
// and rows, in two statements; give it a batch at a time.
func (s *Store) ReadFates(ctx context.Context, calls []ProviderCallEvent) error {
	if len(calls) == 0 {
		return nil
	}
	byRow := map[rowID][]int{}
	var ts, ss, ks []string
	for i := range calls {
		calls[i].Fate = KeyFate{State: KeyGone}
		row := rowID{storedText(calls[i].Tenant), storedText(calls[i].Scope), storedText(calls[i].Key)}
		if _, ok := byRow[row]; !ok {
			ts, ss, ks = append(ts, row.tenant), append(ss, row.scope), append(ks, row.key)
		}
		byRow[row] = append(byRow[row], i)
	}
	if err := s.readLastEvents(ctx, calls, byRow, ts, ss, ks); err != nil {
		return storeError(ctx, "key fates", err)
	}
	rows, err := s.db.Query(ctx, s.sql.op.keyRows, ts, ss, ks)
	if err != nil {
		return storeError(ctx, "key fates", err)
	}
	defer rows.Close()
	for rows.Next() {
		var row rowID
		var state KeyState
		var status int32
		if err := rows.Scan(&row.tenant, &row.scope, &row.key, &state, &status); err != nil {
			return storeError(ctx, "key fates", err)
		}
		for _, i := range byRow[row] {
			calls[i].Fate.State, calls[i].Fate.RowStatus = state, int(status)
		}
	}
	if err := rows.Err(); err != nil {
		return storeError(ctx, "key fates", err)
	}
	return nil
}

// readLastEvents sets each call's Fate.Last, Status and Resolution from its key's history.
func (s *Store) readLastEvents(ctx context.Context, calls []ProviderCallEvent, byRow map[rowID][]int, ts, ss, ks []string) error {
	rows, err := s.db.Query(ctx, s.sql.op.keyFates, ts, ss, ks)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() { // oldest first: the last one tells
		var row rowID
		var kind, resolution string
		var status int32
		if err := rows.Scan(&row.tenant, &row.scope, &row.key, &kind, &status, &resolution); err != nil {
			return err
		}
		last, res := EventKind(kind), Resolution(0)
		if last == EventResolved {
			if res, _ = ParseResolution(resolution); res == 0 {
				continue // a resolution this version cannot read tells nothing
			}
		}
		for _, i := range byRow[row] {
			calls[i].Fate.Last, calls[i].Fate.Status, calls[i].Fate.Resolution = last, int(status), res
		}
	}
	return rows.Err()
}
