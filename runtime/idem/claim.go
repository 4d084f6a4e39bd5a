package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// claimStatus is what a claim decided.
type claimStatus int

const (
	claimAcquired   claimStatus = iota + 1 // new key: the caller executes
	claimTakenOver                         // the previous holder's lease expired: the caller executes
	claimReplayed                          // completed before: the outcome is the answer
	claimInProgress                        // held by a live lease
	claimKeyReused                         // same key, different fingerprint (checked first)
)

// event is the event each claim status is reported as.
func (c claimStatus) event() EventKind {
	switch c {
	case claimAcquired:
		return EventAcquired
	case claimTakenOver:
		return EventTakenOver
	case claimReplayed:
		return EventReplayed
	case claimInProgress:
		return EventInProgress
	case claimKeyReused:
		return EventKeyReused
	}
	return EventKind(fmt.Sprintf("claim status %d", int(c)))
}

// attemptOf is the attempt of the claim res holds, or 0.
func attemptOf(res *claimResult) int {
	if res.claim == nil {
		return 0
	}
	return res.claim.Attempt
}

func (c claimStatus) owns() bool { return c == claimAcquired || c == claimTakenOver }

// Claim is a held key, as the handler's context carries it (ClaimFromContext). Its token
// fences completion and release: only the holder of the current claim can store an outcome.
type Claim struct {
	Tenant    string
	Scope     string
	Key       string
	Operation string
	// Attempt counts the executions of this key: 1, or more after takeovers of abandoned claims.
	Attempt int
	Lease   time.Duration

	token  string
	row    rowID // the key's row: tenant, scope and key as the table stores them
	notify bool  // its complete and release notify the duplicates that may wait for it
}

func (c *Claim) hash() string { return KeyHash(c.Scope, c.Key) }

// args are the leading parameters of every statement about c: tenant, scope, key, token.
func (c *Claim) args(more ...any) []any {
	return append([]any{c.row.tenant, c.row.scope, c.row.key, c.token}, more...)
}

type claimKey struct{}

func withClaim(ctx context.Context, c *Claim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// ClaimFromContext returns the claim under which a handler runs: its key, scope, tenant and
// attempt. ok is false outside a handler run by Do or by generated code.
func ClaimFromContext(ctx context.Context) (c *Claim, ok bool) {
	c, ok = ctx.Value(claimKey{}).(*Claim)
	return c, ok
}

// claimResult is what a claim returns.
type claimResult struct {
	status     claimStatus
	claim      *Claim        // claimAcquired, claimTakenOver
	outcome    *Outcome      // claimReplayed
	retryAfter time.Duration // claimInProgress: time left on the lease, at least 1s
	// claimReplayed: the outcome stays final at least this long after the statement was sent
	// (the row's expiry, as the database measured it); the replay cache keeps it no longer.
	final time.Duration
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

func lease(p *DoParams) time.Duration { return orDefault(p.Lease, DefaultLease) }
func ttl(p *DoParams) time.Duration   { return orDefault(p.TTL, DefaultTTL) }

// timeout bounds p's handler: DoParams.Timeout, by default the lease.
func timeout(p *DoParams) time.Duration { return orDefault(p.Timeout, lease(p)) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// newClaim is the claim p would hold; its token is fresh.
func newClaim(p *DoParams) *Claim {
	return &Claim{Tenant: p.Tenant, Scope: p.Scope, Key: p.Key, Operation: p.Operation, Lease: lease(p), token: newToken(),
		row: rowOf(p), notify: waits(p)}
}

// claimArgs are the claim statement's parameters. The row's expiry is set at the claim to the
// TTL plus the handler's timeout, the latest the outcome can complete, so that the completion
// need not move it (see sql/complete.sql): the key is remembered at least the TTL after it
// completes, and at most the timeout longer.
func (s *Store) claimArgs(c *Claim, p *DoParams) []any {
	return c.args(p.Operation, p.Fingerprint, millis(lease(p)), millis(ttl(p)+timeout(p)))
}

// claim claims p's key in one statement (claim: lease; it commits at once). It inserts the key
// in flight with a lease, or returns the existing row, or takes over a row whose holder's lease
// expired (same fingerprint only). The fingerprint is compared before anything else about an
// existing row: a different request gets claimKeyReused even while the first is in flight.
//
// The claim commits asynchronously: the statement turns synchronous_commit off for its own
// transaction (sql/claim.sql, Async), so the request does not wait for the claim's WAL flush.
// That loses nothing: the business transaction commits synchronously, after the claim, and
// flushing its commit flushes all WAL before it, the claim's included, so no outcome or business
// row can be durable without its claim. A crash that loses a claim loses only the claim (its
// work had not committed): a duplicate that saw it was told "in progress", and the retry runs
// anew (as attempt 1: see docs/runtime.md).
func (s *Store) claim(ctx context.Context, p *DoParams) (*claimResult, error) {
	c := newClaim(p)
	sent := time.Now()
	res, err := s.scanClaim(s.db.QueryRow(ctx, s.sql.claimAsync, s.claimArgs(c, p)...), c, new(string))
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: c.hash()})
		return nil, storeError(ctx, "claim", err)
	}
	s.remember(p, res, sent)
	s.emit(ctx, Event{Kind: res.status.event(), Operation: p.Operation, KeyHash: c.hash(), Start: sent, Attempt: attemptOf(res)})
	return res, nil
}

// claimAndBegin is claim that also begins the business transaction when the claim makes this
// request the key's owner, in the same round trip (the Store holds the connection: db is a
// pool). The batch is: BEGIN, the claim (which commits asynchronously, as in claim), COMMIT, a
// guard that fails unless the committed claim is this request's (sql/owner_guard.sql), and the
// business BEGIN. A failed statement skips the rest of a batch, so a replay, an in-progress
// answer or a mismatch never begins anything and costs one round trip. tx is open when res owns
// the key, and nil otherwise; when the guard disagrees with the claim (a lease shorter than a
// round trip), tx is nil with an owning res, and the caller begins on its own.
//
// Once sent, the batch is waited for even when ctx ends meanwhile (bounded by the store
// timeout): the server runs the statements it has received whether or not the client still
// reads, so a claim abandoned half-way could commit after any release sent behind it, and the
// key would answer in-progress for its whole lease. Knowing what the batch did, a caller that
// has gone gives back exactly the claim it made, if it made one.
func (s *Store) claimAndBegin(ctx context.Context, p *DoParams) (tx *bizTx, res *claimResult, err error) {
	c := newClaim(p)
	sent := time.Now()
	committed := false
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	tx, err = s.beginWith(rctx, func(b *pgx.Batch) {
		b.Queue(beginSQL)
		b.Queue(s.sql.claimAsync, s.claimArgs(c, p)...).QueryRow(func(row pgx.Row) (err error) {
			res, err = s.scanClaim(row, c, new(string))
			return err
		})
		b.Queue(commitSQL).Exec(func(tag pgconn.CommandTag) error {
			committed = tag.String() == "COMMIT"
			return nil
		})
		b.Queue(s.sql.ownerGuard, c.args()...)
	}, nil)
	var pgErr *pgconn.PgError
	switch {
	case err == nil && res.status.owns():
		// Claimed and begun.
	case committed && res != nil && (err == nil || errors.As(err, &pgErr) && pgErr.Code == ownerGuardCode):
		// Claimed (or not) and committed; the business transaction was not begun.
		s.rollback(ctx, tx) // hands the idle connection back
		tx, err = nil, nil
	default:
		if tx != nil {
			s.rollback(ctx, tx)
			// The batch's answer was lost (the store timeout ran out, the connection broke) or a
			// later statement failed, so its claim may have committed: give the key back (only a
			// row still in flight with this request's token is deleted), or a retry would wait
			// out the lease.
			s.releaseLost(ctx, c)
		}
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: c.hash()})
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, storeError(ctx, "claim and begin", err)
	}
	if ctx.Err() != nil { // the caller left while the batch ran: undo what it did, and only that
		if res.status.owns() {
			if tx != nil {
				s.rollback(ctx, tx)
			}
			s.release(ctx, c, EventReleased, 0)
		}
		return nil, nil, storeError(ctx, "claim and begin", ctx.Err())
	}
	s.remember(p, res, sent)
	s.emit(ctx, Event{Kind: res.status.event(), Operation: p.Operation, KeyHash: c.hash(), Start: sent, Attempt: attemptOf(res)})
	return tx, res, nil
}

// ownerGuardCode is the owner guard failing on purpose (sql/owner_guard.sql).
const ownerGuardCode = "22012"

// claimTx begins the business transaction and claims in it (claim: transaction), in one
// round trip when the Store holds the connection: the begin, a transaction-local lock_timeout
// that bounds the wait for a concurrent holder's transaction, the claim, and the caller's
// lock_timeout restored. locked says the wait ran out; tx is then aborted. tx is returned
// whenever it was begun (the caller rolls it back unless it owns the key). It reports no
// in-progress event for a wait that ran out: a caller retrying such a claim reports the wait
// once, when it gives up.
//
// Ahead of the begin, the same round trip checks for a remembered completed row (sql/replay.sql):
// a replay then needs neither the transaction nor its rollback.
func (s *Store) claimTx(ctx context.Context, p *DoParams, wait time.Duration) (tx *bizTx, res *claimResult, locked bool, err error) {
	c := newClaim(p)
	lockTimeout := fmt.Sprintf("%dms", millis(wait))
	for check := true; ; check = false {
		sent := time.Now()
		var done *peeked
		var ahead func(b *pgx.Batch)
		if _, pooled := s.db.(acquirer); check && pooled { // without a pool, nothing goes ahead
			ahead = func(b *pgx.Batch) {
				b.Queue(s.sql.replay, c.row.tenant, c.row.scope, c.row.key).Query(func(rows pgx.Rows) (err error) {
					done, err = scanPeek(rows)
					return err
				})
				b.Queue(s.sql.replayGuard, c.row.tenant, c.row.scope, c.row.key, lockTimeout)
			}
		}
		tx, err = s.beginWith(ctx, ahead, func(batch *pgx.Batch) {
			if ahead == nil { // else the replay check's guard set it
				batch.Queue(lockWaitSet, lockTimeout)
			}
			batch.Queue(s.sql.claim, s.claimArgs(c, p)...).QueryRow(func(row pgx.Row) error {
				var err error
				res, err = s.scanClaim(row, c)
				return err
			})
			batch.Queue(lockWaitRestore)
		})
		var pgErr *pgconn.PgError
		switch {
		case check && errors.As(err, &pgErr) && pgErr.Code == replayGuardCode:
			// The guard found a completed row: the begin and the claim were skipped.
			if done == nil {
				// It completed between the check and its guard: check again, the plain way.
				s.rollback(ctx, tx)
				continue
			}
			res, err = done.result(p.Fingerprint)
			if err != nil {
				s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: c.hash()})
				return tx, nil, false, storeError(ctx, "replay check", err)
			}
			s.remember(p, res, sent)
			s.emit(ctx, Event{Kind: res.status.event(), Operation: p.Operation, KeyHash: c.hash(), Start: sent, Attempt: attemptOf(res)})
			return tx, res, false, nil
		case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available: the wait ran out
			return tx, &claimResult{status: claimInProgress, retryAfter: time.Second}, true, nil
		case err != nil:
			s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: c.hash()})
			return tx, nil, false, storeError(ctx, "claim in transaction", err)
		}
		s.remember(p, res, sent)
		s.emit(ctx, Event{Kind: res.status.event(), Operation: p.Operation, KeyHash: c.hash(), Start: sent, Attempt: attemptOf(res)})
		return tx, res, false, nil
	}
}

// lockWaitSet bounds a transaction-mode claim's wait for a concurrent holder, saving the
// caller's lock_timeout; lockWaitRestore puts it back. Both are local to the transaction.
const (
	lockWaitSet = `SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`
	lockWaitRestore = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`
)

// replayGuardCode is the replay check's guard failing on purpose (sql/replay_guard.sql).
const replayGuardCode = "22012"

// peeked is a remembered completed row, as the replay check read it.
type peeked struct {
	fingerprint string
	outcome     storedOutcome
	expiresLeft time.Duration
}

// scanPeek reads the replay check's row, if any.
func scanPeek(rows pgx.Rows) (*peeked, error) {
	var pk *peeked
	for rows.Next() {
		pk = &peeked{}
		var leftMS int64
		if err := rows.Scan(&pk.fingerprint, &pk.outcome.status, &pk.outcome.headers, &pk.outcome.body, &pk.outcome.reference, &leftMS); err != nil {
			return nil, err
		}
		pk.expiresLeft = time.Duration(leftMS) * time.Millisecond
	}
	return pk, rows.Err()
}

// result is the claim's answer for a request with fingerprint fp: the replay, or key reused.
func (pk *peeked) result(fp string) (*claimResult, error) {
	if pk.fingerprint != fp {
		return &claimResult{status: claimKeyReused}, nil
	}
	o, err := pk.outcome.decode()
	if err != nil {
		return nil, err
	}
	return &claimResult{status: claimReplayed, outcome: o, final: pk.expiresLeft}, nil
}

// storedOutcome is an outcome as its row stores it.
type storedOutcome struct {
	status    *int32
	headers   []byte
	body      []byte
	reference *string
}

func (so *storedOutcome) decode() (*Outcome, error) {
	o := &Outcome{Body: so.body}
	if so.status != nil {
		o.Status = int(*so.status)
	}
	if so.reference != nil {
		o.Reference = *so.reference
	}
	if len(so.headers) > 0 {
		if err := json.Unmarshal(so.headers, &o.Header); err != nil {
			return nil, fmt.Errorf("stored headers are not a JSON object of string lists: %w", err)
		}
	}
	return o, nil
}

// scanClaim reads the claim's row; extra receives the columns a variant adds (claimAsync's).
func (s *Store) scanClaim(row pgx.Row, c *Claim, extra ...any) (*claimResult, error) {
	var (
		mine, sameFP bool
		attempt      int32
		state        string
		stored       storedOutcome
		leftMS       int64
		heldMS       int64
		finalMS      int64
	)
	dst := append([]any{&mine, &attempt, &sameFP, &state, &stored.status, &stored.headers, &stored.body, &stored.reference, &leftMS, &heldMS, &finalMS}, extra...)
	if err := row.Scan(dst...); err != nil {
		return nil, err
	}
	switch {
	case mine:
		c.Attempt = int(attempt)
		st := claimAcquired
		if attempt > 1 {
			st = claimTakenOver
		}
		return &claimResult{status: st, claim: c}, nil
	case !sameFP:
		return &claimResult{status: claimKeyReused}, nil
	case state == "complete":
		o, err := stored.decode()
		if err != nil {
			return nil, err
		}
		return &claimResult{status: claimReplayed, outcome: o, final: time.Duration(finalMS) * time.Millisecond}, nil
	default:
		left := time.Duration(leftMS) * time.Millisecond
		// How long the holder has run: since the key's first claim, or, after a takeover (whose
		// claim time the row does not keep), at least since its last renewal.
		elapsed := time.Duration(heldMS) * time.Millisecond
		if attempt > 1 {
			elapsed = max(c.Lease-left, 0)
		}
		return &claimResult{status: claimInProgress, retryAfter: s.retryIn(c.Operation, elapsed, left)}, nil
	}
}

// RoundRetryAfter rounds d up to whole seconds, at least one: what a Retry-After header can
// say. [InProgressError.RetryAfter] is always rounded so.
func RoundRetryAfter(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}

// completeArgs are the complete statement's parameters for c's outcome o.
func (s *Store) completeArgs(c *Claim, o *Outcome, ttl time.Duration) ([]any, error) {
	var headers any // SQL NULL without headers
	if len(o.Header) > 0 {
		b, err := json.Marshal(o.Header)
		if err != nil {
			return nil, fmt.Errorf("idem: complete: encode headers: %w", err)
		}
		headers = string(b)
	}
	var ref *string
	if o.Reference != "" {
		ref = &o.Reference
	}
	return c.args(int32(o.Status), headers, o.Body, ref, millis(ttl)), nil
}

// complete stores an outcome (completeArgs) for c inside tx: if tx is rolled back, so is the
// completion. ErrLeaseLost means another request took the key over, and tx must roll back.
func (s *Store) complete(ctx context.Context, tx pgx.Tx, c *Claim, args []any) error {
	if _, err := tx.Exec(ctx, s.sql.complete, args...); err != nil {
		if lost := s.completeFailed(ctx, c, err); errors.Is(lost, ErrLeaseLost) {
			return lost
		}
		return storeError(ctx, "complete", err)
	}
	return nil
}

// releaseRow deletes c's row if c still owns it; gone says it did.
func (s *Store) releaseRow(ctx context.Context, c *Claim) (gone bool, err error) {
	channel, payload := s.note(c)
	tag, err := s.db.Exec(ctx, s.sql.release, c.args(channel, payload)...)
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
		return false, storeError(ctx, "release", err)
	}
	return tag.RowsAffected() > 0, nil
}

// renew extends c's lease by c.Lease from now; ErrLeaseLost if c no longer owns the key.
func (s *Store) renew(ctx context.Context, c *Claim) error {
	tag, err := s.db.Exec(ctx, s.sql.renew, c.args(millis(c.Lease))...)
	if err != nil {
		return storeError(ctx, "renew lease", err)
	}
	if tag.RowsAffected() == 0 {
		s.emit(ctx, Event{Kind: EventLeaseLost, Operation: c.Operation, KeyHash: c.hash()})
		return ErrLeaseLost
	}
	return nil
}
