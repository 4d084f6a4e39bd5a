package idem

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// A key's history is a durable, append-only list of what happened to it (claimed, taken over,
// completed, released and why, replays counted, a mismatch refused, a lease lost, a provider
// call, uncertain, resolved), kept in the history table beside the key table
// (HistoryTableName) for Config.HistoryRetention, longer than the key itself, so that a dispute
// ("I paid twice") months later can still be read. The runtime appends to it in the
// transactions it already runs, for operations that ask for it (DoParams.History), and always
// for those declared uncertain-on-loss (DoParams.UncertainOnLoss).

// DefaultHistoryRetention is how long history rows are kept by default: 120 days, the window in
// which card schemes take most chargebacks.
const DefaultHistoryRetention = 120 * 24 * time.Hour

var (
	// ErrUncertain: an earlier attempt of this key was lost after a provider call, and the key
	// waits for an operator or a reconciliation to settle it (problem operation-uncertain). A
	// retry cannot settle it, so clients must not retry.
	ErrUncertain = errors.New("idem: the outcome of an earlier attempt is uncertain")
	// ErrNotUncertain: Resolve was asked to settle a key that is not uncertain.
	ErrNotUncertain = errors.New("idem: the key is not uncertain")
)

// HistoryEvent is one row of a key's history.
type HistoryEvent struct {
	At        time.Time // the database clock
	Kind      EventKind
	Operation string
	Attempt   int    // the attempt the event belongs to; 0 when none does (resolved, replayed)
	Status    int    // completed: the stored status; resolved as completed: the status stored
	Detail    string // released: why; key_reused: what came; resolved: the evidence
	Actor     string // resolved: who
	Replays   int    // replayed: how many replays the row counts; key_reused: how many mismatched retries
	// A provider call: the provider's name, the derived key sent to it, and the amount (minor
	// units) and currency the call moved, when the handler said.
	Provider    string
	ProviderKey string
	Amount      int64
	Currency    string
}

// ProviderCall describes a call to a provider, for the history and for reconciliation against
// the provider's records.
type ProviderCall struct {
	// Provider names the provider ("acquirer", "bank:payouts"); see Derivation.Key.
	Provider string
	// Amount (in minor units) and Currency (ISO 4217) the call moves, when it moves money;
	// reconciliation compares them with the provider's records. Zero and "" when it does not.
	Amount   int64
	Currency string
}

// Resolution is how Resolve settles an uncertain key.
type Resolution int

const (
	// ResolveCompleted: the lost attempt took effect (the provider charged). The key becomes
	// complete with the outcome given, which every retry replays.
	ResolveCompleted Resolution = iota + 1
	// ResolveFailed: the lost attempt took no effect (the provider has no record of it). The key
	// is given back: the next retry executes anew.
	ResolveFailed
)

func (r Resolution) String() string {
	switch r {
	case ResolveCompleted:
		return "completed"
	case ResolveFailed:
		return "failed"
	}
	return fmt.Sprintf("Resolution(%d)", int(r))
}

// ParseResolution parses "completed" or "failed".
func ParseResolution(s string) (Resolution, error) {
	switch s {
	case "completed":
		return ResolveCompleted, nil
	case "failed":
		return ResolveFailed, nil
	}
	return 0, fmt.Errorf("idem: resolution %q: want completed or failed", s)
}

// ResolveParams say which uncertain key to settle, how, by whom and why.
type ResolveParams struct {
	// Tenant, Scope and Key name the key as KeyInfo gives them.
	Tenant, Scope, Key string
	As                 Resolution
	// Outcome is what retries replay once the key is resolved as completed (required then; a
	// reference for reference storage, a status for marker storage). Ignored for ResolveFailed.
	Outcome *Outcome
	// TTL is how long the completed key is remembered from now; default DefaultTTL.
	TTL time.Duration
	// Actor (who settles it) and Evidence (why: a ticket, the provider's record) are required,
	// and go to the history.
	Actor, Evidence string
}

func (p *ResolveParams) check() error {
	switch {
	case p == nil:
		return errors.New("idem: Resolve: params are nil")
	case p.As != ResolveCompleted && p.As != ResolveFailed:
		return errors.New("idem: Resolve: As must be ResolveCompleted or ResolveFailed")
	case p.As == ResolveCompleted && p.Outcome == nil:
		return errors.New("idem: Resolve: resolving as completed needs the Outcome retries will replay")
	case p.As == ResolveCompleted && (p.Outcome.Status < 100 || p.Outcome.Status > 599):
		return fmt.Errorf("idem: Resolve: outcome status %d is not an HTTP status", p.Outcome.Status)
	case strings.TrimSpace(p.Actor) == "":
		return errors.New("idem: Resolve: Actor is required: the history records who settled the key")
	case strings.TrimSpace(p.Evidence) == "":
		return errors.New("idem: Resolve: Evidence is required: the history records why the key was settled")
	}
	return nil
}

// Resolve settles an uncertain key in a transaction of its own. ErrNotUncertain when the key is
// not uncertain (already settled, or never was), ErrNoSuchKey when there is no such key.
func (s *Store) Resolve(ctx context.Context, p *ResolveParams) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return s.ResolveTx(ctx, tx, p) })
}

// ResolveTx is Resolve inside the caller's transaction, so that an application can write what
// the lost attempt should have written (the payment row the provider's record proves) in the
// same commit that settles the key.
func (s *Store) ResolveTx(ctx context.Context, tx pgx.Tx, p *ResolveParams) error {
	if err := p.check(); err != nil {
		return err
	}
	row := rowID{storedText(p.Tenant), storedText(p.Scope), storedText(p.Key)}
	var state, operation string
	err := tx.QueryRow(ctx, `SELECT state, operation FROM `+s.table+
		` WHERE tenant = $1 AND scope = $2 AND key = $3 FOR UPDATE`, row.tenant, row.scope, row.key).Scan(&state, &operation)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNoSuchKey
	case err != nil:
		return fmt.Errorf("idem: resolve: %w", err)
	case state != string(KeyUncertain):
		return fmt.Errorf("%w (it is %s)", ErrNotUncertain, state)
	}
	ev := HistoryEvent{Kind: EventResolved, Operation: fromStoredText(operation), Actor: p.Actor,
		Detail: p.As.String() + ": " + p.Evidence}
	switch p.As {
	case ResolveCompleted:
		var headers any
		if len(p.Outcome.Header) > 0 {
			b, err := encodeStoredHeaders(p.Outcome.Header)
			if err != nil {
				return fmt.Errorf("idem: resolve: encode headers: %w", err)
			}
			headers = b
		}
		var ref *string
		if p.Outcome.Reference != "" {
			ref = &p.Outcome.Reference
		}
		_, err = tx.Exec(ctx, `UPDATE `+s.table+` SET state = 'complete', status = $4, headers = $5, body = $6,
	reference = $7, completed_at = statement_timestamp(), expires_at = statement_timestamp() + $8::interval
WHERE tenant = $1 AND scope = $2 AND key = $3`, row.tenant, row.scope, row.key,
			int32(p.Outcome.Status), headers, p.Outcome.Body, ref, interval(orDefault(p.TTL, DefaultTTL)))
		ev.Status = p.Outcome.Status
	case ResolveFailed:
		_, err = tx.Exec(ctx, `DELETE FROM `+s.table+` WHERE tenant = $1 AND scope = $2 AND key = $3`,
			row.tenant, row.scope, row.key)
	}
	if err != nil {
		return fmt.Errorf("idem: resolve: %w", err)
	}
	if err := s.appendHistory(ctx, tx, row, ev); err != nil {
		return err
	}
	s.observeHistory(ctx, row, ev)
	return nil
}

// observeHistory tells Config.Observer of a history event that is not also one of the claim's
// own (resolved, provider_call, uncertain).
func (s *Store) observeHistory(ctx context.Context, row rowID, ev HistoryEvent) {
	if s.cfg.Observer == nil {
		return
	}
	s.cfg.Observer(ctx, Event{Kind: ev.Kind, Operation: ev.Operation, KeyHash: KeyHash(fromStoredText(row.scope), fromStoredText(row.key))})
}

// MaxHistoryRows caps what History returns: the oldest rows of a key with more are left out.
const MaxHistoryRows = 1000

// History returns the history of the key (tenant, scope and key as KeyInfo gives them), oldest
// first. A key with no history (its operation keeps none, or it is older than the retention)
// has an empty one. It is an operator's read, sent with the simple protocol: planned with its
// values, so Citus routes it to the key's shard even where sessions force generic plans, which
// Citus cannot make of it.
func (s *Store) History(ctx context.Context, tenant, scope, key string) ([]HistoryEvent, error) {
	rows, err := s.db.Query(ctx, `SELECT at, kind, operation, coalesce(attempt, 0), coalesce(status, 0),
	coalesce(detail, ''), coalesce(actor, ''), coalesce(replays, 0), coalesce(provider, ''),
	coalesce(provider_key, ''), coalesce(amount, 0), coalesce(currency, '')
FROM (SELECT * FROM `+s.events+` WHERE tenant = $1 AND scope = $2 AND key = $3 ORDER BY at DESC LIMIT $4) h
ORDER BY at`, pgx.QueryExecModeSimpleProtocol, storedText(tenant), storedText(scope), storedText(key), MaxHistoryRows)
	if err != nil {
		return nil, fmt.Errorf("idem: history: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (HistoryEvent, error) {
		var ev HistoryEvent
		var at pgtype.Timestamptz
		var kind, op string
		var attempt, status, replays int32
		err := r.Scan(&at, &kind, &op, &attempt, &status, &ev.Detail, &ev.Actor, &replays, &ev.Provider,
			&ev.ProviderKey, &ev.Amount, &ev.Currency)
		ev.At, ev.Kind, ev.Operation = at.Time, EventKind(kind), fromStoredText(op)
		ev.Attempt, ev.Status, ev.Replays = int(attempt), int(status), int(replays)
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
	var conds []string
	var args []any
	where := func(lhs string, v any) {
		args = append(args, v)
		conds = append(conds, lhs+"$"+strconv.Itoa(len(args)))
	}
	switch {
	case p.Key != "" && p.KeyHash != "":
		return nil, errors.New("idem: GoneKeys: give Key or KeyHash, not both")
	case p.Key != "":
		where("key = ", storedText(p.Key))
	case p.KeyHash != "":
		h, err := ParseKeyHash(p.KeyHash)
		if err != nil {
			return nil, err
		}
		where(keyHashSQL+" = ", h)
	default:
		return nil, errors.New("idem: GoneKeys: Key or KeyHash is required")
	}
	if p.Tenant != nil {
		where("tenant = ", storedText(*p.Tenant))
	}
	if p.Operation != "" {
		where("operation = ", storedText(p.Operation))
	}
	rows, err := s.db.Query(ctx, `SELECT tenant, scope, key, (array_agg(operation ORDER BY at DESC))[1], min(at)
FROM `+s.events+` h
WHERE `+strings.Join(conds, " AND ")+`
	AND NOT EXISTS (SELECT FROM `+s.table+` k WHERE k.tenant = h.tenant AND k.scope = h.scope AND k.key = h.key)
GROUP BY tenant, scope, key
ORDER BY tenant, scope, key
LIMIT `+strconv.Itoa(MaxLookupRows), append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
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
