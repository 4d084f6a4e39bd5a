package idem

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// The read-only inspection API: what support and operators need to answer "what happened to
// this key?" without writing SQL against the key table. idemgen keys and runtime/idemadmin are
// built on it, so the table is read in one place, with the tenant encoding and key hash the
// request path uses.
//
// None of it is on the request path. A lookup by tenant and key uses the primary key; everything
// else (a lookup by key hash, a lookup across tenants, lists and statistics) reads the whole
// table, which is fine for a support desk and an occasional scrape but not for a hot loop.

// ErrNoSuchKey is returned by [Store.LookupKey] when no row matches: the key was never claimed,
// was released (its handler failed and a retry runs anew), or has expired and been purged.
var ErrNoSuchKey = errors.New("idem: no such key")

// KeyInfo is one row of the key table, as support sees it. Times come from the database clock;
// Now is that clock when the row was read, so ages and "lease left" need no app server clock.
type KeyInfo struct {
	// Tenant is the key table's tenant column, as the runtime stores it (empty when the policy's
	// scope has no tenant).
	Tenant    string
	Scope     string
	Key       string
	Operation string
	// KeyHash is the key as logs and events print it ([KeyHash] of Scope and Key).
	KeyHash     string
	Fingerprint string
	State       KeyState
	// Attempt counts the executions of this key: 1, or more after takeovers of abandoned claims.
	Attempt int
	// Status, Reference and Header are the stored outcome (zero while in flight).
	Status    int
	Reference string
	Header    http.Header
	// BodySize is the stored body's length in bytes. Body is the body itself, only when asked
	// for (LookupKeyParams.IncludeBody): it may hold personal data.
	BodySize int
	Body     []byte
	// CreatedAt is the first claim of the key's history; CompletedAt is zero while in flight.
	CreatedAt      time.Time
	CompletedAt    time.Time
	ExpiresAt      time.Time // far in the future (year 300000) for an uncertain key: it expires only once settled
	LeaseExpiresAt time.Time
	Now            time.Time
}

// Stale reports an in-flight key whose lease has run out: its holder stopped renewing it (the
// process died or lost the database). The next request with the same fingerprint takes it
// over; until then, or until it expires, the key answers in-progress.
func (k *KeyInfo) Stale() bool {
	return k.State == KeyInFlight && !k.LeaseExpiresAt.After(k.Now)
}

// Expired reports a key past its expiry: it behaves as new and waits for Purge.
func (k *KeyInfo) Expired() bool { return !k.ExpiresAt.After(k.Now) }

// LookupKeyParams say which key [Store.LookupKey] reads. Exactly one of Key and KeyHash is set.
type LookupKeyParams struct {
	// Tenant is the tenant the key belongs to; nil matches every tenant, and a pointer to ""
	// matches keys whose scope has no tenant.
	Tenant *string
	// Key is the key as the client sent it (the Idempotency-Key header's value).
	Key string
	// KeyHash is the key as a log line prints it (key_hash=…, 16 hex digits).
	KeyHash string
	// Operation, when set, keeps only that operation's key (the same key may be used once per
	// operation).
	Operation string
	// IncludeBody fills KeyInfo.Body. Off by default: stored bodies may hold personal data.
	IncludeBody bool
}

// MaxLookupRows caps what [Store.LookupKey] returns: the same key in more tenants, operations
// or scopes than this is listed only up to it.
const MaxLookupRows = 100

// ListKeysParams filter [Store.ListKeys]. The zero value lists the newest keys of every tenant.
type ListKeysParams struct {
	// Tenant is as in LookupKeyParams: nil matches every tenant.
	Tenant    *string
	Operation string
	// State keeps only keys in this state (KeyInFlight, KeyComplete or KeyUncertain); "" keeps all.
	State KeyState
	// Stale keeps only stale in-flight keys (see KeyInfo.Stale); it implies State KeyInFlight.
	Stale bool
	// Since keeps only keys created at or after it.
	Since time.Time
	// Limit is the most keys returned; default DefaultListLimit, at most MaxListLimit.
	Limit int
}

// Limits of ListKeys.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// KeyStats summarise the key table (see [Store.KeyStats]).
type KeyStats struct {
	// Total counts every operation's keys; its Operation is "".
	Total OperationKeyStats
	// Operations are per operation, sorted by name.
	Operations []OperationKeyStats
	Now        time.Time // the database clock when the table was read
}

// OperationKeyStats count one operation's keys. Expired overlaps the others: it counts keys of
// either state past their expiry, which behave as new and wait for Purge.
type OperationKeyStats struct {
	Operation string
	InFlight  int64
	Stale     int64 // in flight, lease run out (included in InFlight)
	Complete  int64
	Expired   int64
	// OldestInFlight is when the oldest in-flight key was first claimed; zero when none is.
	OldestInFlight time.Time
	// Uncertain counts keys whose outcome is uncertain (KeyUncertain), waiting for an operator
	// or a reconciliation; OldestUncertain is when the oldest of them called its provider.
	Uncertain       int64
	OldestUncertain time.Time
}

// LookupKey returns the rows of one key: usually one, more when the same key was used by
// several operations or tenants (Tenant nil) or scopes. It returns [ErrNoSuchKey] when none
// matches. Rows come sorted by tenant, operation and scope, at most [MaxLookupRows].
//
// A lookup by Key with a Tenant reads the primary key; by KeyHash, or without a Tenant, it reads
// the whole table.
func (s *Store) LookupKey(ctx context.Context, p *LookupKeyParams) ([]KeyInfo, error) {
	if p == nil {
		p = &LookupKeyParams{}
	}
	q := keyQuery{body: p.IncludeBody}
	switch {
	case p.Key != "" && p.KeyHash != "":
		return nil, errors.New("idem: LookupKey: give Key or KeyHash, not both")
	case p.Key != "":
		q.key = ptr(storedText(p.Key))
	case p.KeyHash != "":
		h, err := ParseKeyHash(p.KeyHash)
		if err != nil {
			return nil, err
		}
		q.hash = &h
	default:
		return nil, errors.New("idem: LookupKey: Key or KeyHash is required")
	}
	q.tenant, q.operation = storedPtr(p.Tenant), storedOperation(p.Operation)
	keys, err := s.queryKeys(ctx, "lookup key", &q, MaxLookupRows)
	if err == nil && len(keys) == 0 {
		return nil, ErrNoSuchKey
	}
	return keys, err
}

// ListKeys lists keys newest first (by CreatedAt), without bodies.
func (s *Store) ListKeys(ctx context.Context, p *ListKeysParams) ([]KeyInfo, error) {
	if p == nil {
		p = &ListKeysParams{}
	}
	limit := p.Limit
	switch {
	case limit <= 0:
		limit = DefaultListLimit
	case limit > MaxListLimit:
		limit = MaxListLimit
	}
	state := p.State
	if p.Stale {
		if state != "" && state != KeyInFlight {
			return nil, fmt.Errorf("idem: ListKeys: Stale keys are in flight, not %q", state)
		}
		state = KeyInFlight
	}
	q := keyQuery{stale: p.Stale, newest: true, tenant: storedPtr(p.Tenant), operation: storedOperation(p.Operation)}
	switch state {
	case "":
	case KeyInFlight, KeyComplete, KeyUncertain:
		q.state = ptr(string(state))
	default:
		return nil, fmt.Errorf("idem: ListKeys: unknown state %q (use %s, %s or %s)", state, KeyInFlight, KeyComplete, KeyUncertain)
	}
	if !p.Since.IsZero() {
		q.since = &p.Since
	}
	return s.queryKeys(ctx, "list keys", &q, limit)
}

// KeyStats counts the keys per operation and state. It reads the whole table.
//
// The database's clock is read first, and the counts compare the rows' times with it as a
// parameter: one aggregate over the table, grouped by operation, which Citus runs on every
// shard and merges (it refuses a join of the table with a sub-select of the clock).
func (s *Store) KeyStats(ctx context.Context) (*KeyStats, error) {
	st := &KeyStats{}
	if err := s.db.QueryRow(ctx, s.sql.op.clock).Scan(&st.Now); err != nil {
		return nil, storeError(ctx, "key stats", err)
	}
	rows, err := s.db.Query(ctx, s.sql.op.keyStats, st.Now)
	if err != nil {
		return nil, storeError(ctx, "key stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var o OperationKeyStats
		var oldest, oldestUncertain *time.Time
		if err := rows.Scan(&o.Operation, &o.InFlight, &o.Stale, &o.Complete, &o.Expired, &oldest, &o.Uncertain, &oldestUncertain); err != nil {
			return nil, storeError(ctx, "key stats", err)
		}
		o.Operation = fromStoredText(o.Operation)
		if oldest != nil {
			o.OldestInFlight = *oldest
		}
		if oldestUncertain != nil {
			o.OldestUncertain = *oldestUncertain
		}
		st.Operations = append(st.Operations, o)
		t := &st.Total
		t.InFlight += o.InFlight
		t.Stale += o.Stale
		t.Complete += o.Complete
		t.Expired += o.Expired
		if !o.OldestInFlight.IsZero() && (t.OldestInFlight.IsZero() || o.OldestInFlight.Before(t.OldestInFlight)) {
			t.OldestInFlight = o.OldestInFlight
		}
		t.Uncertain += o.Uncertain
		if !o.OldestUncertain.IsZero() && (t.OldestUncertain.IsZero() || o.OldestUncertain.Before(t.OldestUncertain)) {
			t.OldestUncertain = o.OldestUncertain
		}
	}
	if err := rows.Err(); err != nil {
		return nil, storeError(ctx, "key stats", err)
	}
	return st, nil
}

// ParseKeyHash reads a key hash as a log line prints it ([KeyHash]: 16 hex digits, in either
// case, surrounding space ignored) and returns it in the form [KeyInfo.KeyHash] has.
func ParseKeyHash(h string) (string, error) {
	h = strings.ToLower(strings.TrimSpace(h))
	if _, err := hex.DecodeString(h); err != nil || len(h) != 16 {
		return "", fmt.Errorf("idem: key hash %s is not a key hash: want the 16 hex digits a log line prints after key_hash=", strconv.Quote(h))
	}
	return h, nil
}

// keyQuery is what sql/op_keys.sql selects by: nil leaves a condition out.
type keyQuery struct {
	body, stale, newest                 bool
	key, hash, tenant, operation, state *string
	since                               *time.Time
}

// storedPtr is a tenant as the request path writes it ([storedText]), so that a lookup finds
// what a request with this tenant would claim; nil matches every tenant.
func storedPtr(t *string) *string {
	if t == nil {
		return nil
	}
	return ptr(storedText(*t))
}

func storedOperation(op string) *string {
	if op == "" {
		return nil
	}
	return ptr(storedText(op))
}

// queryKeys reads the key rows q selects, at most limit. It is sent with the simple protocol:
// planned with its values, so the conditions left out fold away (sql/op_keys.sql).
func (s *Store) queryKeys(ctx context.Context, what string, q *keyQuery, limit int) ([]KeyInfo, error) {
	rows, err := s.db.Query(ctx, s.sql.op.keys, pgx.QueryExecModeSimpleProtocol, q.body, q.key, q.hash, q.tenant, q.operation,
		q.state, q.stale, q.since, q.newest, limit)
	if err != nil {
		return nil, storeError(ctx, what, err)
	}
	defer rows.Close()
	var keys []KeyInfo
	for rows.Next() {
		var k KeyInfo
		var tenant, headers []byte
		var status *int32
		var reference *string
		var completed *time.Time
		var expires pgtype.Timestamptz // 'infinity' for an uncertain key
		if err := rows.Scan(&tenant, &k.Scope, &k.Key, &k.Operation, &k.Fingerprint, &k.State, &k.Attempt,
			&status, &reference, &headers, &k.BodySize, &k.Body,
			&k.CreatedAt, &completed, &expires, &k.LeaseExpiresAt, &k.Now); err != nil {
			return nil, storeError(ctx, what, err)
		}
		k.ExpiresAt = finite(expires)
		k.Tenant, k.Scope, k.Key = fromStoredText(string(tenant)), fromStoredText(k.Scope), fromStoredText(k.Key)
		k.Operation, k.Fingerprint = fromStoredText(k.Operation), fromStoredText(k.Fingerprint)
		k.KeyHash = KeyHash(k.Scope, k.Key)
		if status != nil {
			k.Status = int(*status)
		}
		if reference != nil {
			k.Reference = *reference
		}
		if completed != nil {
			k.CompletedAt = *completed
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &k.Header); err != nil {
				return nil, fmt.Errorf("idem: %s: stored headers are not a JSON object of string lists: %w", what, err)
			}
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, storeError(ctx, what, err)
	}
	return keys, nil
}
