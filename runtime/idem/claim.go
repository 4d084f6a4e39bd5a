package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ClaimParams identify a request.
type ClaimParams struct {
	// Tenant is the key table's distribution column: every statement about the key names it, so
	// on Citus it stays on one shard. Empty when the scope has no tenant. Scope includes the
	// tenant too (ScopeString), so keys stay apart whatever Tenant is set to.
	Tenant      string
	Scope       string // canonical scope, see ScopeString
	Key         string // the validated idempotency key
	Operation   string // operation id
	Fingerprint string // hex SHA-256 of the canonical request, see Fingerprinter
	Lease       time.Duration
	TTL         time.Duration
}

func (p *ClaimParams) validate() error {
	if p == nil {
		return errors.New("idem: claim: params are nil")
	}
	if p.Key == "" {
		return errors.New("idem: claim: empty key (validate it with ParseKey first)")
	}
	return nil
}

func (p *ClaimParams) lease() time.Duration { return orDefault(p.Lease, DefaultLease) }
func (p *ClaimParams) ttl() time.Duration   { return orDefault(p.TTL, DefaultTTL) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// ClaimStatus is the outcome of a claim.
type ClaimStatus int

const (
	ClaimAcquired   ClaimStatus = iota + 1 // new key: the caller executes
	ClaimTakenOver                         // the previous holder's lease expired: the caller executes
	ClaimReplay                            // completed before: Outcome holds what to answer
	ClaimInProgress                        // held by a live lease: RetryAfter says for how long
	ClaimMismatch                          // same key, different fingerprint (checked first)
)

func (c ClaimStatus) String() string {
	switch c {
	case ClaimAcquired:
		return "acquired"
	case ClaimTakenOver:
		return "taken over"
	case ClaimReplay:
		return "replay"
	case ClaimInProgress:
		return "in progress"
	case ClaimMismatch:
		return "fingerprint mismatch"
	}
	return fmt.Sprintf("ClaimStatus(%d)", int(c))
}

// Claim is a held key; its Token fences completion and release.
type Claim struct {
	Tenant    string
	Scope     string
	Key       string
	Operation string
	Token     string
	Attempt   int
	Lease     time.Duration
}

func (c *Claim) hash() string { return KeyHash(c.Scope, c.Key) }

// Outcome is what a completed request answered.
type Outcome struct {
	Status    int
	Header    http.Header // stored whole: allow-listed headers only
	Body      []byte      // stored whole (response storage, or reference storage without a Reference)
	Reference string      // reference storage only
}

// ClaimResult is what Claim returns.
type ClaimResult struct {
	Status     ClaimStatus
	Claim      *Claim        // ClaimAcquired, ClaimTakenOver
	Outcome    *Outcome      // ClaimReplay
	RetryAfter time.Duration // ClaimInProgress: time left on the lease, at least 1s
}

// statements are the SQL texts for one key table, built once per Store.
type statements struct {
	claim, complete, release, renew, purge, purgeCount string
}

func newStatements(table string) statements {
	// A row is "fresh" (behaves as a new key) when its TTL has run out and nobody holds it; it is
	// "takeable" when it is fresh or its holder's lease ran out on the same request. The
	// fingerprint condition means a different request can never take over a live key's history.
	const fresh = `(k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp()))`
	takeable := func(fingerprint string) string {
		return `(` + fresh + ` OR (k.state = 'in_flight' AND k.lease_expires_at <= statement_timestamp() AND k.fingerprint = ` + fingerprint + `))`
	}
	set := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN %[2]s THEN EXCLUDED.%[1]s ELSE k.%[1]s END", col, takeable("EXCLUDED.fingerprint"))
	}
	clear := func(col string) string {
		return fmt.Sprintf("%[1]s = CASE WHEN %[2]s THEN NULL ELSE k.%[1]s END", col, takeable("EXCLUDED.fingerprint"))
	}
	const leftMS = `greatest(0, ceil(extract(epoch FROM lease_expires_at - statement_timestamp()) * 1000))::bigint`
	var b strings.Builder
	// The claim is one statement and one round trip for all five outcomes.
	//
	// cur reads the row as this statement's snapshot sees it. When it exists and nobody may take
	// it (the common duplicate: in flight, completed, or a different request), that row is the
	// answer and the statement writes nothing: replays and in-progress answers are plain reads.
	//
	// Otherwise (no row yet, or one that looks takeable) the INSERT decides, and it alone may
	// hand out ownership. Its ON CONFLICT DO UPDATE always updates (a takeover writes new values,
	// anything else rewrites the row unchanged), so RETURNING yields the row's latest committed
	// version even when a concurrent request inserted or took it over after the snapshot; a
	// DO NOTHING would return no row at all in that race. The conflict check locks the row and
	// re-evaluates "takeable" on its latest version, so two racing takeovers cannot both win.
	//
	// A snapshot answer can be stale by the time it is read (a holder that has just completed or
	// released): the caller then gets in-progress and its retry sees the new state. Ownership is
	// never decided from the snapshot.
	fmt.Fprintf(&b, `WITH cur AS (
	SELECT k.attempt, k.fingerprint, k.state, k.status, k.headers, k.body, k.reference, k.lease_expires_at,
		%[2]s AS takeable
	FROM %[1]s AS k WHERE k.tenant = $8 AND k.scope = $1 AND k.key = $2
), ins AS (
	INSERT INTO %[1]s AS k
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
	SELECT $8, $1, $2, $3, $4, 'in_flight', $5::uuid,
		statement_timestamp() + $6::bigint * interval '1 millisecond', 1, statement_timestamp(),
		statement_timestamp() + $7::bigint * interval '1 millisecond'
	WHERE NOT EXISTS (SELECT FROM cur WHERE NOT cur.takeable)
	ON CONFLICT (tenant, scope, key) DO UPDATE SET
		%[3]s, %[4]s, %[5]s, %[6]s, %[7]s, %[8]s,
		attempt = CASE WHEN %[9]s THEN 1 WHEN %[10]s THEN k.attempt + 1 ELSE k.attempt END,
		%[11]s, %[12]s, %[13]s, %[14]s, %[15]s
	RETURNING owner_token = $5::uuid AS mine, attempt, fingerprint = $4 AS same_fingerprint, state,
		status, headers, body, reference, %[16]s AS lease_left_ms
)
SELECT * FROM ins
UNION ALL
SELECT false, attempt, fingerprint = $4, state, status, headers, body, reference, %[16]s FROM cur WHERE NOT cur.takeable`,
		table, takeable("$4"),
		set("operation"), set("fingerprint"), set("state"), set("owner_token"), set("lease_expires_at"), set("expires_at"),
		fresh, takeable("EXCLUDED.fingerprint"),
		fmt.Sprintf("created_at = CASE WHEN %s THEN EXCLUDED.created_at ELSE k.created_at END", fresh),
		clear("status"), clear("headers"), clear("body"), clear("reference")+", "+clear("completed_at"),
		leftMS)
	return statements{
		claim: b.String(),
		complete: `UPDATE ` + table + ` SET state = 'complete', status = $4, headers = $5, body = $6, reference = $7,
	completed_at = statement_timestamp(), lease_expires_at = statement_timestamp(),
	expires_at = statement_timestamp() + $8::bigint * interval '1 millisecond'
WHERE tenant = $9 AND scope = $1 AND key = $2 AND owner_token = $3::uuid AND state = 'in_flight'`,
		release: `DELETE FROM ` + table + ` WHERE tenant = $4 AND scope = $1 AND key = $2 AND owner_token = $3::uuid AND state = 'in_flight'`,
		renew: `UPDATE ` + table + ` SET lease_expires_at = statement_timestamp() + $4::bigint * interval '1 millisecond'
WHERE tenant = $5 AND scope = $1 AND key = $2 AND owner_token = $3::uuid AND state = 'in_flight'`,
		// Purge alone spans tenants: a maintenance job off the request path.
		purge: `DELETE FROM ` + table + ` AS k USING (
	SELECT tenant, scope, key FROM ` + table + ` AS k WHERE ` + fresh + `
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS doomed
WHERE k.tenant = doomed.tenant AND k.scope = doomed.scope AND k.key = doomed.key`,
		purgeCount: `SELECT count(*) FROM ` + table + ` AS k WHERE ` + fresh,
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func millis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return ms
}

// Claim claims p.Key in one statement and commits at once (claim: lease).
//
// It inserts the key in flight with a lease, or returns the existing row, or takes over a row
// whose holder's lease expired (same fingerprint only). The fingerprint is compared before
// anything else about an existing row: a different request gets ClaimMismatch even while the
// first is in flight. Errors that mean the store cannot be reached wrap ErrStoreUnavailable.
func (s *Store) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	return s.claim(ctx, s.db, p)
}

// ClaimTxOpts tune ClaimTx.
type ClaimTxOpts struct {
	// Wait bounds how long the claim waits for a concurrent holder's transaction to end.
	// Zero means the claim's lease.
	Wait time.Duration
}

// ClaimTx claims inside the caller's transaction (claim: transaction). A concurrent duplicate
// waits (bounded by opts.Wait) for the first transaction to end, then replays or claims. When the
// wait runs out the result is ClaimInProgress and tx is aborted: the caller must roll it back.
// The claim is made in one round trip (a pipelined batch that bounds the wait with a
// transaction-local lock_timeout and restores the caller's setting afterwards). If tx rolls
// back, so does the claim: no Release is needed.
//
// While ClaimTx waits, tx holds its connection. Serve and Do therefore wait differently: they
// call it with a short wait and, when that runs out, roll back and retry after a pause in which
// they hold no connection.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p *ClaimParams, opts *ClaimTxOpts) (*ClaimResult, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	wait := p.lease()
	if opts != nil && opts.Wait > 0 {
		wait = opts.Wait
	}
	res, locked, err := s.claimTx(ctx, tx, p, wait)
	if locked {
		s.emit(ctx, Event{Kind: EventInProgress, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
	}
	return res, err
}

// claimTx is ClaimTx without its in-progress event for a lock wait that ran out (locked), so
// that a caller retrying such a claim reports the wait once, when it gives up.
func (s *Store) claimTx(ctx context.Context, tx pgx.Tx, p *ClaimParams, wait time.Duration) (res *ClaimResult, locked bool, err error) {
	token := newToken()
	batch := &pgx.Batch{}
	batch.Queue(`SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", millis(wait)))
	batch.Queue(s.sql.claim, s.claimArgs(p, token)...).QueryRow(func(row pgx.Row) error {
		var err error
		res, err = s.scanClaim(row, p, token)
		return err
	})
	batch.Queue(`SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`)
	err = tx.SendBatch(ctx, batch).Close()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: the wait ran out
		return &ClaimResult{Status: ClaimInProgress, RetryAfter: time.Second}, true, nil
	}
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
		return nil, false, storeError(ctx, "claim in transaction", err)
	}
	s.emitClaim(ctx, p, res)
	return res, false, nil
}

func (s *Store) claimArgs(p *ClaimParams, token string) []any {
	return []any{p.Scope, p.Key, p.Operation, p.Fingerprint, token, millis(p.lease()), millis(p.ttl()), tenantColumn(p.Tenant)}
}

func (s *Store) claim(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, p *ClaimParams) (*ClaimResult, error) {
	token := newToken()
	res, err := s.scanClaim(q.QueryRow(ctx, s.sql.claim, s.claimArgs(p, token)...), p, token)
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
		return nil, storeError(ctx, "claim", err)
	}
	s.emitClaim(ctx, p, res)
	return res, nil
}

func (s *Store) scanClaim(row pgx.Row, p *ClaimParams, token string) (*ClaimResult, error) {
	var (
		mine, sameFP bool
		attempt      int32
		state        string
		status       *int32
		headers      []byte
		body         []byte
		reference    *string
		leftMS       int64
	)
	if err := row.Scan(&mine, &attempt, &sameFP, &state, &status, &headers, &body, &reference, &leftMS); err != nil {
		return nil, err
	}
	switch {
	case mine:
		st := ClaimAcquired
		if attempt > 1 {
			st = ClaimTakenOver
		}
		return &ClaimResult{Status: st, Claim: &Claim{
			Tenant: p.Tenant, Scope: p.Scope, Key: p.Key, Operation: p.Operation, Token: token, Attempt: int(attempt), Lease: p.lease(),
		}}, nil
	case !sameFP:
		return &ClaimResult{Status: ClaimMismatch}, nil
	case state == "complete":
		o := &Outcome{Body: body}
		if status != nil {
			o.Status = int(*status)
		}
		if reference != nil {
			o.Reference = *reference
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &o.Header); err != nil {
				return nil, fmt.Errorf("stored headers are not a JSON object of string lists: %w", err)
			}
		}
		return &ClaimResult{Status: ClaimReplay, Outcome: o}, nil
	default:
		return &ClaimResult{Status: ClaimInProgress, RetryAfter: retryAfter(time.Duration(leftMS) * time.Millisecond)}, nil
	}
}

// retryAfter rounds the time left on a lease up to whole seconds, at least one.
func retryAfter(left time.Duration) time.Duration {
	secs := (left + time.Second - 1) / time.Second
	if secs < 1 {
		secs = 1
	}
	return secs * time.Second
}

func (s *Store) emitClaim(ctx context.Context, p *ClaimParams, r *ClaimResult) {
	var kind EventKind
	switch r.Status {
	case ClaimAcquired:
		kind = EventClaimed
	case ClaimTakenOver:
		kind = EventTakeover
	case ClaimReplay:
		kind = EventReplayed
	case ClaimInProgress:
		kind = EventInProgress
	case ClaimMismatch:
		kind = EventMismatch
	}
	s.emit(ctx, Event{Kind: kind, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
}

// CompleteTx stores o for c inside tx. If tx is rolled back, the completion is as well.
// ErrLeaseLost means another request took the key over: tx must roll back. ttl <= 0 means 24h.
// o is stored as given (Serve filters headers and checks the body size before calling it).
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, c *Claim, o *Outcome, ttl time.Duration) error {
	if c == nil || o == nil {
		return errors.New("idem: complete: claim and outcome must not be nil")
	}
	var headers []byte
	if len(o.Header) > 0 {
		var err error
		if headers, err = json.Marshal(o.Header); err != nil {
			return fmt.Errorf("idem: complete: encode headers: %w", err)
		}
	}
	var ref *string
	if o.Reference != "" {
		ref = &o.Reference
	}
	var hdr any
	if headers != nil {
		hdr = string(headers)
	}
	tag, err := tx.Exec(ctx, s.sql.complete, c.Scope, c.Key, c.Token, int32(o.Status), hdr, o.Body, ref,
		millis(orDefault(ttl, DefaultTTL)), tenantColumn(c.Tenant))
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
		return storeError(ctx, "complete", err)
	}
	if tag.RowsAffected() == 0 {
		s.emit(ctx, Event{Kind: EventLeaseLost, Operation: c.Operation, KeyHash: c.hash()})
		return ErrLeaseLost
	}
	return nil
}

// Release deletes c's row if c still owns it, so a retry executes anew. A row that another
// request has taken over, or that was completed, is left alone.
func (s *Store) Release(ctx context.Context, c *Claim) error {
	if c == nil {
		return nil
	}
	if _, err := s.db.Exec(ctx, s.sql.release, c.Scope, c.Key, c.Token, tenantColumn(c.Tenant)); err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
		return storeError(ctx, "release", err)
	}
	return nil
}

// Renew extends c's lease by lease from now (database clock); ErrLeaseLost if not owned.
func (s *Store) Renew(ctx context.Context, c *Claim, lease time.Duration) error {
	tag, err := s.db.Exec(ctx, s.sql.renew, c.Scope, c.Key, c.Token, millis(orDefault(lease, DefaultLease)), tenantColumn(c.Tenant))
	if err != nil {
		return storeError(ctx, "renew lease", err)
	}
	if tag.RowsAffected() == 0 {
		s.emit(ctx, Event{Kind: EventLeaseLost, Operation: c.Operation, KeyHash: c.hash()})
		return ErrLeaseLost
	}
	return nil
}
