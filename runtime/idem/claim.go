package idem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimStatus is what a claim decided.
type claimStatus int

const (
	claimAcquired   claimStatus = iota + 1 // new key: the caller executes
	claimTakenOver                         // the previous holder's lease expired: the caller executes
	claimReplayed                          // completed before: the outcome is the answer
	claimInProgress                        // held by a live lease
	claimKeyReused                         // same key, different fingerprint (checked first)
	// claimUncertain: an earlier attempt was lost after a provider call (DoParams.UncertainOnLoss):
	// the key is uncertain, or its holder's lease ran out after the call and the claim turns it
	// uncertain (claimResult.abandoned; Store.turnedUncertain).
	claimUncertain
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
	case claimUncertain:
		return EventUncertain
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

	token pgtype.UUID // sent as a uuid in binary: PostgreSQL parses no text for it
	row   rowID       // the key's row: tenant, scope and key as the table stores them
	// argv are the claim statement's parameters (claimArgs), each boxed once when the claim is
	// made: every statement about c leads with a prefix of them (args), so a batch's statements
	// share the one slice instead of boxing the same values again. Nothing appends to argv in
	// place: args and claimArgs hand out slices capped at their length.
	argv []any
	// read are the parameters of the read of a claim under the key's lock (readArgs), and spare
	// the room for the completion's parameters (completeArgs): both allocated with argv, in one
	// array, so that a claim costs one slice however many statements it sends.
	read, spare []any
	// lockArg are the parameters of the claim under the key's lock (tenant, scope, key and its
	// lock id: sql/claim_lock.sql), in the claim's array too: the lock statement needs no slice
	// of its own.
	lockArg []any
	// keyHash is KeyHash(Scope, Key), computed when the claim is made if its events reach
	// anyone (Store.observed), and otherwise by hash on demand.
	keyHash string
	notify  bool // its complete and release notify the duplicates that may wait for it
	// locked: the claim is the key's advisory lock, held by the business transaction
	// (sql/claim_lock.sql), and the key's row is written only at the completion, with the
	// fingerprint: inserted (sql/complete_insert.sql), or rewritten when the claim takes over a
	// row it found (takeover, sql/complete_takeover.sql).
	locked, takeover bool
	fingerprint      string

	// store is the Store that made the claim (ProviderKey records through it).
	store *Store
	// history: the claim's events go to the key's history (DoParams.History, or implied by
	// uncertainOnLoss: DoParams.UncertainOnLoss).
	history, uncertainOnLoss bool
	// providerCalled is set once the holder asked for a provider key and the call was recorded
	// (ProviderKey): under uncertainOnLoss a release then turns the key uncertain. Set and read
	// with sync/atomic (1 once set): a handler past its timeout may still run while Do releases.
	providerCalled int32
	// txMode: the claim lives in the business transaction (ClaimTransaction): its history's claim
	// row is written with the completion, or after the rollback that gives it back.
	txMode bool
	// later holds the writes the handler deferred (Defer) while it runs, when its completion is
	// one batch they can join; nil when it is not.
	later *deferred
}

// hash is KeyHash(c.Scope, c.Key): computed once, when the claim was made, for a claim whose
// events reach anyone; a claim's keyHash is never written after it is shared, so a goroutine
// renewing its lease may read it.
func (c *Claim) hash() string {
	if c.keyHash != "" {
		return c.keyHash
	}
	return KeyHash(c.Scope, c.Key)
}

// args are the leading parameters of every statement about c: tenant, scope, key, token.
func (c *Claim) args(more ...any) []any {
	lead := c.argv[:4:4]
	if len(more) == 0 {
		return lead
	}
	return append(lead, more...)
}

// readArgs are the parameters of the claim's guarded read (sql/claim_read_guarded.sql, or
// sql/claim_read.sql on Citus): tenant, scope, key, fingerprint.
// fingerprint is the boxed fingerprint, argv's own when the claim has all its parameters.
func (c *Claim) readArgs(fingerprint any) []any {
	return []any{c.argv[0], c.argv[1], c.argv[2], fingerprint}
}

// rowArgs are the parameters of a statement about c's row alone: tenant, scope, key.
func (c *Claim) rowArgs() []any { return c.argv[:3:3] }

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
	// claimUncertain: abandoned says the row is still in flight, its holder's lease run out
	// after a provider call, and the claim must turn it uncertain (Store.turnedUncertain);
	// rowAttempt is that holder's attempt, which fences the transition.
	abandoned  bool
	rowAttempt int32
}

// newToken is a random (version 4) UUID.
func newToken() pgtype.UUID {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return pgtype.UUID{Bytes: b, Valid: true}
}

func millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// interval is d as a statement's interval parameter: whole milliseconds, at least one. pgx sends
// a time.Duration as an interval in binary, so the statement adds it to a time as it is, where
// a count of milliseconds cost it a conversion and a multiplication each time it ran.
func interval(d time.Duration) time.Duration { return time.Duration(millis(d)) * time.Millisecond }

// boxInterval is interval(d) as a statement's parameter. Boxing a time.Duration is an
// allocation, and the intervals a claim sends are an operation's lease, TTL and timeout, the same
// on every request: the Store keeps the last few it boxed and hands them out again (a miss
// replaces them in turn). A nil s boxes each time.
func (s *Store) boxInterval(d time.Duration) any {
	iv := interval(d)
	if s == nil {
		return iv
	}
	for i := range s.boxed {
		if b := s.boxed[i].Load(); b != nil && b.iv == iv {
			return b.box
		}
	}
	b := &boxedInterval{iv: iv, box: iv}
	s.boxed[s.boxedNext.Add(1)%uint32(len(s.boxed))].Store(b)
	return b.box
}

// boxedInterval is an interval and its boxed form (boxInterval).
type boxedInterval struct {
	iv  time.Duration
	box any
}

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

// newClaim is the claim p would hold, its token fresh, with the key's hash computed at once
// when events about it reach anyone: each request reports two or three.
func (s *Store) newClaim(ctx context.Context, p *DoParams) *Claim {
	c := newClaimWith(s, p, newToken(), true)
	s.hashIfObserved(ctx, c)
	return c
}

// hashIfObserved computes c's key hash now, before c is shared, when its events reach an
// Observer or the log: emitClaim then need not hash for each.
func (s *Store) hashIfObserved(ctx context.Context, c *Claim) {
	if s.cfg.Observer != nil || s.log.Enabled(ctx, slog.LevelDebug) {
		c.keyHash = KeyHash(c.Scope, c.Key)
	}
}

// newClaimWith is the claim p would hold with token, and its parameters (argv): all of the
// claim statement's when full, only the leading four otherwise (a claim under the key's advisory
// lock sends no claim statement). The row's expiry is set at the claim to the TTL plus the
// handler's timeout, the latest the outcome can complete, so that the completion need not move
// it (see sql/complete.sql): the key is remembered at least the TTL after it completes, and at
// most the timeout longer.
//
// Without full, the claim's read (c.read: tenant, scope, key, fingerprint) goes ahead of argv in
// the same array. Behind argv is the room for the completion's parameters (c.spare).
//
// The claim and its parameters' array are one allocation.
//
// s, when not nil, boxes the claim's intervals (boxInterval).
func newClaimWith(s *Store, p *DoParams, token pgtype.UUID, full bool) *Claim {
	var c *Claim
	row := rowOf(p)
	if full {
		with := &struct {
			Claim
			all [8 + completeParams]any
		}{}
		c = &with.Claim
		all := with.all[:]
		all[0], all[1], all[2], all[3] = row.tenant, row.scope, row.key, token
		all[4], all[5], all[6], all[7] = storedText(p.Operation), storedText(p.Fingerprint), s.boxInterval(lease(p)), s.boxInterval(ttl(p)+timeout(p))
		c.argv, c.spare = all[:8:8], all[8:8]
	} else {
		with := &struct {
			Claim
			all [4 + 4 + completeLockedParams + 4]any
		}{}
		c = &with.Claim
		all := with.all[:]
		all[0], all[1], all[2], all[3] = row.tenant, row.scope, row.key, storedText(p.Fingerprint)
		all[4], all[5], all[6], all[7] = all[0], all[1], all[2], token
		c.read, c.argv, c.spare = all[:4:4], all[4:8:8], all[8:8:8+completeLockedParams]
		lock := all[8+completeLockedParams:]
		lock[0], lock[1], lock[2] = all[0], all[1], all[2] // the lock id is set by the claim
		c.lockArg = lock
	}
	c.Tenant, c.Scope, c.Key, c.Operation, c.Lease, c.token = p.Tenant, p.Scope, p.Key, p.Operation, lease(p), token
	c.row, c.notify = row, waits(p)
	c.store, c.history, c.uncertainOnLoss = s, p.History || p.UncertainOnLoss, p.UncertainOnLoss
	c.txMode = p.Claim == ClaimTransaction
	return c
}

// The number of parameters of the completion (sql/complete.sql) and of the completion of a claim
// under the key's lock (sql/complete_insert.sql, sql/complete_takeover.sql).
const (
	completeParams       = 9
	completeLockedParams = 12
)

// claimArgs are the claim statement's parameters (sql/claim.sql, sql/claim_fast.sql).
func (c *Claim) claimArgs() []any { return c.argv }

// completeArgs are the complete statement's parameters for c's outcome o.
func (s *Store) completeArgs(c *Claim, o *Outcome, ttl time.Duration) ([]any, error) {
	var headers any // SQL NULL without headers
	if len(o.Header) > 0 {
		b, err := encodeStoredHeaders(o.Header)
		if err != nil {
			return nil, fmt.Errorf("idem: complete: encode headers: %w", err)
		}
		headers = b
	}
	var ref *string
	if o.Reference != "" {
		ref = &o.Reference
	}
	n := completeParams
	if c.locked {
		n = completeLockedParams
	}
	// The claim's spare room holds them, the first time (a completion is sent once per claim).
	args := c.spare[:0]
	c.spare = nil
	if cap(args) < n {
		args = make([]any, 0, n)
	}
	args = append(args, c.args()...)
	args = append(args, int32(o.Status), headers, o.Body, ref, s.boxInterval(ttl))
	if c.locked {
		var fp any
		if c.read != nil {
			fp = c.read[3] // boxed already, for the claim's read
		} else {
			fp = storedText(c.fingerprint)
		}
		args = append(args, storedText(c.Operation), fp, int32(c.Attempt))
	}
	return args, nil
}

// completeSQL is the statement that completes c: the update of the row its claim wrote, or, for
// a claim under the key's lock, the row's one write.
func (s *Store) completeSQL(c *Claim) string {
	switch {
	case c.locked && c.takeover:
		return s.sql.completeTakeover
	case c.locked:
		return s.sql.completeInsert
	}
	return s.sql.complete
}

// complete stores an outcome (completeArgs) for c inside tx: if tx is rolled back, so is the
// completion. ErrLeaseLost means another request took the key over, and tx must roll back.
func (s *Store) complete(ctx context.Context, tx pgx.Tx, c *Claim, args []any) error {
	for _, q := range s.set().beforeComplete() {
		if _, err := tx.Exec(ctx, q); err != nil {
			return storeError(ctx, "complete", err)
		}
	}
	if _, err := tx.Exec(ctx, s.completeSQL(c), args...); err != nil {
		if lost := s.completeFailed(ctx, c, err); errors.Is(lost, ErrLeaseLost) {
			return lost
		}
		return storeError(ctx, "complete", err)
	}
	if c.history {
		if err := s.appendHistory(ctx, tx, c.row, c.completionHistory(int(args[4].(int32)))...); err != nil {
			return storeError(ctx, "complete", err)
		}
	}
	return nil
}

// renew extends c's lease by c.Lease from now; ErrLeaseLost if c no longer owns the key.
func (s *Store) renew(ctx context.Context, c *Claim) error {
	n, err := s.returned(ctx, s.sql.renew, c.args(interval(c.Lease))...)
	if err != nil {
		return storeError(ctx, "renew lease", err)
	}
	if n == 0 {
		s.record(ctx, s.leaseLostBy(c))
		return ErrLeaseLost
	}
	return nil
}

// returned runs sql and counts the rows it returned. A write says what it wrote through
// RETURNING, never through its command tag: no decision of the Store rests on a tag, whose
// count a distributed database may report for rows it did not write.
func (s *Store) returned(ctx context.Context, sql string, args ...any) (n int, err error) {
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// counting is a batch callback that counts the rows its statement returned into n.
func counting(n *int) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			*n++
		}
		return rows.Err()
	}
}

// statementRan is a batch callback that records in ok that its statement ran without error. A batch
// stops at its first failed statement, so a COMMIT that ran committed a transaction in which
// nothing failed: that, not the COMMIT's command tag, says the transaction committed.
func statementRan(ok *bool) func(pgconn.CommandTag) error {
	return func(pgconn.CommandTag) error {
		*ok = true
		return nil
	}
}
