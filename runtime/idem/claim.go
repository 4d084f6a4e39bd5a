package idem

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	// uncertain (claimResult.abandoned; Store.settleUncertain).
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
	// lockArg is the parameter of the claim under the key's lock (its lock id), in the claim's
	// array too: the lock statement needs no slice of its own.
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
	// why is the reason the claim is given back, for its history (set before the release, by the
	// goroutine that releases it; read by the release and its retries). turnedUncertain says the
	// release turned the key uncertain instead of deleting it (releaseRow).
	why             string
	turnedUncertain bool
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
	// after a provider call, and the claim must turn it uncertain (Store.settleUncertain);
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
			all [4 + 4 + completeLockedParams + 1]any
		}{}
		c = &with.Claim
		all := with.all[:]
		all[0], all[1], all[2], all[3] = row.tenant, row.scope, row.key, storedText(p.Fingerprint)
		all[4], all[5], all[6], all[7] = all[0], all[1], all[2], token
		c.read, c.argv, c.spare = all[:4:4], all[4:8:8], all[8:8:8+completeLockedParams]
		c.lockArg = all[8+completeLockedParams:]
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

// claim claims p's key (claim: lease; it commits at once) in a transaction of its own: the path
// for a DB that is not a pool (the Store cannot hold a connection for a batch that also begins
// the business transaction). It inserts the key in flight with a lease, or returns the existing
// row, or takes over a row whose holder's lease expired (same fingerprint only). The fingerprint
// is compared before anything else about an existing row: a different request gets
// claimKeyReused even while the first is in flight.
//
// The claim commits asynchronously (asyncCommitSQL), so the request does not wait for the
// claim's WAL flush. That loses nothing: the business transaction commits synchronously, after
// the claim, and flushing its commit flushes all WAL before it, the claim's included, so no
// outcome or business row can be durable without its claim (on Citus the business rows are on
// the claim's shard, so in the same worker's WAL). A crash that loses a claim loses only the
// claim (its work had not committed): a duplicate that saw it was told "in progress", and the
// retry runs anew (as attempt 1: see docs/runtime.md).
func (s *Store) claim(ctx context.Context, p *DoParams) (*claimResult, error) {
	for try := 1; ; try++ {
		c := s.newClaim(ctx, p)
		sent := time.Now()
		res, err := s.claimOnce(ctx, c, p)
		if err != nil {
			// The answer may have been lost after the claim committed (a broken connection, the
			// caller leaving during the COMMIT): give back exactly this claim, if it was made,
			// or the key would answer in progress for its whole lease.
			s.releaseLost(ctx, c)
			s.claimFailed(ctx, c)
			return nil, storeError(ctx, "claim", err)
		}
		if res == nil { // the row changed under the claim: claim again
			if try < claimTries {
				continue
			}
			res = &claimResult{status: claimInProgress, retryAfter: time.Second}
		}
		if s.undoIfGone(ctx, c, nil, res) {
			return nil, storeError(ctx, "claim", ctx.Err())
		}
		s.settleClaim(ctx, p, c, res, sent)
		return res, nil
	}
}

// claimOnce is one try of claim; a nil result means the row changed between the claim's read and
// its write, and the claim must be tried again.
func (s *Store) claimOnce(ctx context.Context, c *Claim, p *DoParams) (res *claimResult, err error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if res == nil || !res.status.owns() {
			cctx, bound := detached(ctx)
			defer bound.end()
			_ = tx.Rollback(cctx)
		}
	}()
	var t claimTry
	b := newBatch()
	s.asyncCommit(b)
	s.queueClaim(b, c, p, &t, nil)
	s.queueClaimHistory(b, c)
	err = tx.SendBatch(ctx, &b.Batch).Close()
	switch {
	case err == nil && t.wrote:
		if err := tx.Commit(ctx); err != nil {
			return nil, err
		}
		return t.owned(c), nil
	case err == nil, t.refused:
		return t.read, nil // nil when the row changed under the claim: claim again
	}
	return nil, err
}

// claimTries bounds how often a claim is tried when the key's row changes between the claim's
// read and its write (requests racing for it): past it, the answer is in progress.
const claimTries = 5

// claimTry is one try of the claim (sql/claim_read.sql or its guarded form, sql/claim.sql, or
// transaction mode's lock and read), as its statements' answers left it.
type claimTry struct {
	// refused says the guarded read returned a row nobody may take and its guard failed on it,
	// skipping the rest of the batch: read is the answer.
	refused bool
	// read is the read's answer when the key has a row nobody may take (the guarded read's guard
	// then fails and the write is skipped); nil without a row, or for one that may be taken.
	read *claimResult
	// wrote says the write returned the row: this request inserted the key or took it over.
	wrote   bool
	attempt int32
	// found, fresh and rowAttempt describe the row the read found (any row: one that may be
	// taken too), for the claim under the key's lock, which takes rows over without a write.
	found, fresh bool
	rowAttempt   int32
	// lockTaken is the answer of the try of the key's advisory lock (sql/claim_lock.sql).
	lockTaken bool
	// inFlight says the narrower read under the key's lock (sql/claim_read_locked.sql) found a
	// row in flight, which it cannot answer: the claim reads it again whole.
	inFlight bool
}

// queueClaim queues the claim of c on b: the read, its guard and the write, and between the
// guard and the write what mid queues (lease mode's BEGIN and its settings). A guard that fails
// skips the rest of b. On Citus there is no guard (see topology.go): the write runs, and writes
// nothing for a row nobody may take.
func (s *Store) queueClaim(b *batch, c *Claim, p *DoParams, t *claimTry, mid func(b *batch)) {
	s.set().fullRead(s, b, c, t, c.readArgs(c.argv[5]))
	if mid != nil {
		mid(b)
	}
	b.Queue(s.sql.claim, c.claimArgs()...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			t.wrote = true
			if err := rows.Scan(&t.attempt); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// queueRead queues the claim's read (sql/claim_read.sql) alone: t.read is its answer when the
// key has a row nobody may take, and nil without a row or for one that may be taken.
func (s *Store) queueRead(b *batch, c *Claim, t *claimTry, args []any) {
	b.Queue(s.sql.claimRead, args...).Query(func(rows pgx.Rows) (err error) {
		t.read, err = s.scanRead(rows, c, t)
		return err
	})
}

// owned is the result of a write that returned the row: c holds the key.
func (t *claimTry) owned(c *Claim) *claimResult {
	c.Attempt = int(t.attempt)
	if t.attempt > 1 {
		return &claimResult{status: claimTakenOver, claim: c}
	}
	return &claimResult{status: claimAcquired, claim: c}
}

// failedOnPurpose says err is one of the claim's statements failing on purpose to skip the rest
// of its batch: every claim guard in sql/ (the full claim's guarded read and its owner guard, the
// replay check's guard of a transaction-mode row claim) divides by zero (SQLSTATE 22012,
// division_by_zero), which nothing else in a claim's batch can raise. (The completion's fence
// fails the same way: leaseLostCode.) None of them is on the path of a new key, a replay or a
// mismatch through a pool on plain PostgreSQL (TestClaimsRaiseNothing).
func failedOnPurpose(err error) bool { return pgCode(err) == "22012" }

// pgCode is the SQLSTATE of the *pgconn.PgError err is or wraps, or "". A nil err, the common
// case, costs nothing: the target errors.As writes to lives on the heap.
func pgCode(err error) string {
	if err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// leaseSettings open lease mode's claim transaction: the BEGIN, and the asynchronous commit (see
// Store.claim).
func (s *Store) leaseSettings(b *batch) {
	b.Queue(beginSQL)
	s.asyncCommit(b)
}

// asyncCommit queues the claim transaction's asynchronous commit (see Store.claim): the
// statement set's (on Citus it must reach the worker that commits, so the propagation of SET
// LOCAL is turned on first; plain PostgreSQL is spared that statement).
func (s *Store) asyncCommit(b *batch) {
	for _, q := range s.set().asyncCommit() {
		b.Queue(q)
	}
}

// claimAndBegin is claim that also begins the business transaction when the claim makes this
// request the key's owner, in the same round trip (the Store holds the connection: db is a
// pool). It tries the fast path first (fastClaimAndBegin), which decides a new key and a
// remembered completed one; any other key (in flight, expired, or completed just now) is
// decided by the full claim (fullClaimAndBegin), in a second round trip.
func (s *Store) claimAndBegin(ctx context.Context, p *DoParams) (tx *bizTx, res *claimResult, err error) {
	var decided bool
	if tx, res, decided, err = s.fastClaimAndBegin(ctx, p); decided {
		return tx, res, err
	}
	if ctx.Err() != nil { // the caller left, and the fast path made no claim
		return nil, nil, storeError(ctx, "claim and begin", ctx.Err())
	}
	return s.fullClaimAndBegin(ctx, p)
}

// fastClaimAndBegin is claimAndBegin's common case, in one round trip. The batch is the claim's
// own transaction (BEGIN; the fast claim's plain insert, sql/claim_fast_lease.sql, which also
// sets the claim's asynchronous commit, see claim for why that loses nothing; the replay check,
// sql/replay.sql; COMMIT), then the business BEGIN. On Citus the replay check goes ahead of the
// claim's transaction and the settings are SET LOCAL statements (see topology.go). No statement
// fails on purpose: for a key that has a row the insert writes nothing, and a remembered
// completed row is the replay check's answer; the business transaction begun for nothing is
// rolled back by the connection's next batch (owed.go), which costs the server less than an
// error would (see sql/claim_lock.sql) and the request no round trip. decided is false when the
// key has a row that the replay check did not answer for: the insert wrote nothing, and the full
// claim must decide.
//
// As in fullClaimAndBegin, the batch is waited for even when ctx ends meanwhile (bounded by the
// store timeout), and a caller that has gone gives back exactly the claim it made, if it made
// one; when it made none, decided is false and the caller must not claim again.
func (s *Store) fastClaimAndBegin(ctx context.Context, p *DoParams) (tx *bizTx, res *claimResult, decided bool, err error) {
	c := s.newClaim(ctx, p)
	sent := time.Now()
	// What the batch's callbacks find, in one variable: they capture it, so it lives on the heap.
	var got struct {
		done      *peeked
		won       int // rows the insert returned: 1 when it inserted the key
		committed bool
	}
	rctx, bound := newBound(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer bound.end()
	tx, err = s.beginSending(ctx, rctx, func(b *batch) {
		s.set().fastLease(s, b, c, &got.won, &got.done)
		s.queueClaimHistory(b, c)
		b.Queue(commitSQL).Exec(statementRan(&got.committed))
	}, nil)
	switch {
	case err == nil && got.won == 1 && got.committed:
		// Claimed and begun.
		c.Attempt = 1
		res = &claimResult{status: claimAcquired, claim: c}
	case err == nil && got.done != nil:
		// A remembered completed row (the insert wrote nothing), and a business BEGIN to take
		// back: the connection's next batch does (owed.go).
		s.owe(ctx, tx)
		tx = nil
		if res, err = got.done.result(p.Fingerprint); err != nil {
			s.claimFailed(ctx, c)
			return nil, nil, true, storeError(ctx, "replay check", err)
		}
	case err == nil && got.won == 0:
		// The key has a row the replay check did not answer for: nothing was written, and the
		// full claim decides, on this connection first of all (owed.go), whose business BEGIN
		// its batch takes back.
		s.owe(ctx, tx)
		return nil, nil, false, nil
	default:
		if tx != nil {
			s.rollback(ctx, tx)
			// As in fullClaimAndBegin: the answer was lost or a later statement failed, so the
			// claim may have committed; only a row in flight with this request's token goes.
			s.releaseLost(ctx, c)
		}
		if err == nil { // the insert won but its commit did not say so: never begin unowned
			err = errors.New("the fast claim's transaction did not commit")
		}
		s.claimFailed(ctx, c)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, true, storeError(ctx, "claim and begin", err)
	}
	if s.undoIfGone(ctx, c, tx, res) {
		return nil, nil, true, storeError(ctx, "claim and begin", ctx.Err())
	}
	s.settleClaim(ctx, p, c, res, sent)
	return tx, res, true, nil
}

// fullClaimAndBegin is claimAndBegin with the full claim, which decides all five outcomes. The
// batch is: the claim's guarded read (sql/claim_read_guarded.sql: a
// row nobody may take is the answer, and nothing begins), BEGIN and its settings, the claim's
// write (sql/claim.sql, which commits asynchronously, as in claim), COMMIT, a guard that fails
// unless the committed claim is this request's (sql/owner_guard.sql), and the business BEGIN. A
// failed statement skips the rest of a batch, so a replay, an in-progress answer or a mismatch
// never begins or writes anything and costs one round trip. tx is open when res owns the key,
// and nil otherwise; when the owner guard disagrees with the claim (a lease shorter than a round
// trip), tx is nil with an owning res, and the caller begins on its own. When the row changes
// between the read and the write, the claim is tried again. On Citus neither guard is sent (see
// topology.go): a business BEGIN that was not the owner's is rolled back.
//
// Once sent, the batch is waited for even when ctx ends meanwhile (bounded by the store
// timeout): the server runs the statements it has received whether or not the client still
// reads, so a claim abandoned half-way could commit after any release sent behind it, and the
// key would answer in-progress for its whole lease. Knowing what the batch did, a caller that
// has gone gives back exactly the claim it made, if it made one.
func (s *Store) fullClaimAndBegin(ctx context.Context, p *DoParams) (tx *bizTx, res *claimResult, err error) {
	for try := 1; ; try++ {
		c := s.newClaim(ctx, p)
		sent := time.Now()
		var t claimTry
		committed := false
		rctx, bound := newBound(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		tx, err = s.beginSending(ctx, rctx, func(b *batch) {
			s.queueClaim(b, c, p, &t, s.leaseSettings)
			s.queueClaimHistory(b, c)
			b.Queue(commitSQL).Exec(statementRan(&committed))
			s.set().ownerGuard(s, b, c)
		}, nil)
		bound.end()
		guarded := failedOnPurpose(err)
		switch {
		case err == nil && t.wrote:
			// Claimed and begun.
			res = t.owned(c)
		case err == nil && t.read != nil:
			// Without guards (Citus): a row nobody may take, and a business BEGIN to take back.
			s.rollback(ctx, tx)
			tx, res = nil, t.read
		case guarded && committed && t.wrote:
			// Claimed and committed, but the owner guard disagrees: the caller begins on its own.
			s.rollback(ctx, tx)
			tx, res = nil, t.owned(c)
		case t.refused:
			// A row nobody may take: the read's answer, and nothing was begun.
			s.rollback(ctx, tx)
			tx, res = nil, t.read
		case guarded && committed || err == nil:
			// The row changed between the read and the write: nothing was written; claim again.
			s.rollback(ctx, tx)
			tx = nil
			if try < claimTries && ctx.Err() == nil {
				continue
			}
			res = &claimResult{status: claimInProgress, retryAfter: time.Second}
		default:
			if tx != nil {
				s.rollback(ctx, tx)
				// The batch's answer was lost (the store timeout ran out, the connection broke) or a
				// later statement failed, so its claim may have committed: give the key back (only a
				// row still in flight with this request's token is deleted), or a retry would wait
				// out the lease.
				s.releaseLost(ctx, c)
			}
			s.claimFailed(ctx, c)
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, nil, storeError(ctx, "claim and begin", err)
		}
		if s.undoIfGone(ctx, c, tx, res) {
			return nil, nil, storeError(ctx, "claim and begin", ctx.Err())
		}
		s.settleClaim(ctx, p, c, res, sent)
		return tx, res, nil
	}
}

// claimTx begins the business transaction and claims in it (claim: transaction), in one
// round trip when the Store holds the connection: the begin, a transaction-local lock_timeout
// that bounds the wait for a concurrent holder's transaction, the claim, and the caller's
// lock_timeout restored. locked says the wait ran out; tx is then aborted. tx is returned
// whenever it was begun (the caller rolls it back unless it owns the key). It reports no
// in-progress event for a wait that ran out: a caller retrying such a claim reports the wait
// once, when it gives up.
//
// Ahead of the begin, the same round trip checks for a remembered completed row (sql/replay.sql):
// a replay then needs neither the transaction nor its rollback. Behind it goes the fast claim
// (sql/claim_fast.sql), a plain insert; only when the key already has a row does the full claim
// follow, in the same transaction, in a second round trip. That is the claim on Citus and without
// a pool; on plain PostgreSQL through a pool the claim is the key's advisory lock instead
// (claimLocked), which writes no row before the completion.
func (s *Store) claimTx(ctx context.Context, p *DoParams, wait time.Duration) (tx *bizTx, res *claimResult, locked bool, err error) {
	c := s.newClaim(ctx, p)
	bound := lockWaitFor(wait)
	var t claimTry
	// bounded queues what q queues under the claim's lock wait, with the caller's lock_timeout
	// saved first (save) and put back behind.
	bounded := func(b *batch, save bool, q func(b *batch)) {
		if save {
			b.Queue(lockWaitSave)
		}
		b.Queue(bound)
		q(b)
		b.Queue(lockWaitDefault)
		b.Queue(lockWaitRestore)
	}
	full := func(b *batch) { s.queueClaim(b, c, p, &t, nil) }
	for try := 1; ; try++ {
		check := try == 1
		sent := time.Now()
		t = claimTry{}
		var done *peeked
		var ahead func(b *batch)
		replayPassed := false
		claim := func(b *batch) { bounded(b, true, full) }
		won := -1                                          // -1: no fast claim was sent
		if _, pooled := s.db.(acquirer); check && pooled { // without a pool, nothing goes ahead
			ahead = func(b *batch) {
				b.Queue(s.sql.replay, c.rowArgs()...).Query(func(rows pgx.Rows) (err error) {
					done, err = s.scanPeek(rows)
					return err
				})
				s.set().replayGuard(s, b, c, &replayPassed)
			}
			claim = func(b *batch) {
				bounded(b, true, func(b *batch) {
					won = 0
					b.Queue(s.sql.claimFast, c.claimArgs()...).Query(counting(&won))
				})
			}
		}
		tx, err = s.beginWith(ctx, ahead, claim)
		if err == nil && done != nil && !replayPassed {
			// No replay guard ran (Citus's set has none), and the replay check found a
			// remembered completed row (the fast claim wrote nothing); tx is begun, and the
			// caller rolls it back. (Behind a replay guard, the same row failed the batch.)
			res, err = done.result(p.Fingerprint)
			if err != nil {
				s.claimFailed(ctx, c)
				return tx, nil, false, storeError(ctx, "replay check", err)
			}
			s.settleClaim(ctx, p, c, res, sent)
			return tx, res, false, nil
		}
		if err == nil && won == 0 {
			// The key has a row: the full claim decides, in the same transaction (the caller's
			// lock_timeout is saved already).
			b := newBatch()
			bounded(b, false, full)
			err = tx.SendBatch(ctx, &b.Batch).Close()
		}
		switch {
		case ahead != nil && !replayPassed && failedOnPurpose(err):
			// The guard found a completed row: the begin and the claim were skipped.
			if done == nil {
				// It completed between the check and its guard: check again, the plain way.
				s.rollback(ctx, tx)
				continue
			}
			res, err = done.result(p.Fingerprint)
			if err != nil {
				s.claimFailed(ctx, c)
				return tx, nil, false, storeError(ctx, "replay check", err)
			}
			s.settleClaim(ctx, p, c, res, sent)
			return tx, res, false, nil
		case pgCode(err) == "55P03": // lock_not_available: the wait ran out
			return tx, &claimResult{status: claimInProgress, retryAfter: time.Second}, true, nil
		case t.refused, err == nil && won != 1 && !t.wrote && t.read != nil:
			// A row nobody may take: the read's answer (the caller rolls tx back).
			res = t.read
		case err == nil && won != 1 && !t.wrote:
			// The row changed between the read and the write: claim again, in a new transaction.
			s.rollback(ctx, tx)
			if try < claimTries {
				continue
			}
			return nil, &claimResult{status: claimInProgress, retryAfter: time.Second}, true, nil
		case err != nil:
			s.claimFailed(ctx, c)
			return tx, nil, false, storeError(ctx, "claim in transaction", err)
		case won == 1:
			// The fast claim inserted the key: new, in flight, this request's.
			c.Attempt = 1
			res = &claimResult{status: claimAcquired, claim: c}
		default:
			res = t.owned(c)
		}
		s.settleClaim(ctx, p, c, res, sent)
		return tx, res, false, nil
	}
}

// The claim transaction's settings, each a statement of its own that touches no table. On
// Citus a set_config runs where its statement runs (a statement on the key table runs on the
// tenant's worker, a statement on no table on the coordinator), while a SET LOCAL reaches the
// workers the transaction uses too, once citus.propagate_set_commands is 'local' for it. So what
// must hold on the worker (the asynchronous commit of lease mode's claim, transaction mode's
// bound on its lock wait) is a SET LOCAL, after the propagation is turned on. On plain
// PostgreSQL citus.propagate_set_commands is a placeholder nobody reads, local to the
// transaction like the rest.
const (
	// propagateSetSQL turns the propagation on for lease mode's claim transaction.
	propagateSetSQL = `SET LOCAL citus.propagate_set_commands = 'local'`
	// asyncCommitSQL: lease mode's claim does not wait for its flush to disk (see Store.claim).
	asyncCommitSQL = `SET LOCAL synchronous_commit = off`
	// lockWaitSave turns the propagation on for transaction mode's claim, which runs in the
	// business transaction (so the handler's own SET LOCALs reach the workers as well), and
	// saves the caller's lock_timeout for lockWaitRestore.
	lockWaitSave = `SELECT set_config('citus.propagate_set_commands', 'local', true),
	set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true)`
	// lockWaitDefault and lockWaitRestore end the claim's lock wait: the first puts the workers
	// back to their own default (a session setting of the coordinator never reaches them), the
	// second the coordinator (or plain PostgreSQL) back to exactly the caller's lock_timeout.
	lockWaitDefault = `SET LOCAL lock_timeout TO DEFAULT`
	lockWaitRestore = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`
)

// lockWaitSteps are the bounds a transaction-mode claim's lock wait may have, and lockWaitSQL
// the statements that set them: a SET takes no parameters, so each bound has a text of its own,
// and a few fixed texts keep the statements the Store prepares per connection few.
var (
	lockWaitSteps = [...]time.Duration{time.Millisecond, 10 * time.Millisecond, txLockWait}
	lockWaitSQL   = [...]string{`SET LOCAL lock_timeout = '1ms'`, `SET LOCAL lock_timeout = '10ms'`, `SET LOCAL lock_timeout = '50ms'`}
)

// lockWaitFor is the statement that bounds the claim's lock wait by the longest step no longer
// than d (the shortest, when d is shorter than every step).
func lockWaitFor(d time.Duration) string {
	for i := len(lockWaitSteps) - 1; i > 0; i-- {
		if d >= lockWaitSteps[i] {
			return lockWaitSQL[i]
		}
	}
	return lockWaitSQL[0]
}

// peeked is a remembered completed row, as the replay check read it.
type peeked struct {
	fingerprint string
	outcome     storedOutcome
	expiresLeft time.Duration
}

// scanPeek reads the replay check's row, if any (sql/replay.sql). With the replay cache on, how
// long it stays remembered is worked out on the statement's clock (wholeMillis, as the claim's
// read); without it the statement returns neither time, and nothing needs them.
func (s *Store) scanPeek(rows pgx.Rows) (*peeked, error) {
	var pk *peeked
	for rows.Next() {
		if s.cache == nil {
			pk = &peeked{}
			if err := rows.Scan(&pk.fingerprint, &pk.outcome.status, &pk.outcome.headers, &pk.outcome.body, &pk.outcome.reference); err != nil {
				return nil, err
			}
			continue
		}
		// The times are scanned into the row's own allocation: a variable whose address Scan
		// takes lives on the heap.
		row := &struct {
			peeked
			expires, now pgtype.Timestamptz
		}{}
		pk = &row.peeked
		if err := rows.Scan(&pk.fingerprint, &pk.outcome.status, &pk.outcome.headers, &pk.outcome.body, &pk.outcome.reference, &row.expires, &row.now); err != nil {
			return nil, err
		}
		pk.expiresLeft = wholeMillis(finite(row.expires).Sub(finite(row.now)))
	}
	return pk, rows.Err()
}

// result is the claim's answer for a request with fingerprint fp: the replay, or key reused. The
// row holds the fingerprint as stored text (storedText), as every statement sends it.
func (pk *peeked) result(fp string) (*claimResult, error) {
	if pk.fingerprint != storedText(fp) {
		return &claimResult{status: claimKeyReused}, nil
	}
	o, err := pk.outcome.decode()
	if err != nil {
		return nil, err
	}
	return &claimResult{status: claimReplayed, outcome: o, final: pk.expiresLeft}, nil
}

// storedOutcome is an outcome as its row stores it. The nullable columns scan into pgtype
// values, which need no allocation (a pointer target costs pgx one per scan).
type storedOutcome struct {
	status    pgtype.Int4
	headers   []byte
	body      []byte
	reference pgtype.Text
}

func (so *storedOutcome) decode() (*Outcome, error) {
	o := &Outcome{Body: so.body}
	if so.status.Valid {
		o.Status = int(so.status.Int32)
	}
	if so.reference.Valid {
		o.Reference = so.reference.String
	}
	if len(so.headers) > 0 {
		var err error
		if o.Header, err = decodeStoredHeaders(so.headers); err != nil {
			return nil, fmt.Errorf("stored headers are not a JSON object of string lists: %w", err)
		}
	}
	return o, nil
}

// scanRead reads the claim's read (sql/claim_read.sql): the answer its row gives when
// nobody may take it, and nil without a row or for one that may be taken (the write decides).
// What the row's times say is worked out here, on the read's clock (its now column), as the
// statement once did in SQL: see readRow.
func (s *Store) scanRead(rows pgx.Rows, c *Claim, t *claimTry) (*claimResult, error) {
	var res *claimResult
	for rows.Next() {
		sc := &readScan{}
		r, stored := &sc.r, &sc.stored
		if err := rows.Scan(&r.attempt, &r.sameFP, &sc.state, &stored.status, &stored.headers, &stored.body, &stored.reference,
			&sc.leaseExpires, &sc.created, &sc.expires, &sc.now, &r.providerCalled); err != nil {
			return nil, err
		}
		var err error
		if res, err = s.answer(sc, c, t); err != nil {
			return nil, err
		}
	}
	return res, rows.Err()
}

// scanLockedRead is scanRead for the narrower read of the claim under the key's lock
// (sql/claim_read_locked.sql), which leaves out the columns only a row in flight needs (attempt,
// lease expiry, first claim time). A completed row is answered as scanRead answers it; a row in
// flight sets t.inFlight and answers nothing, and the caller reads it again whole
// (sql/claim_read.sql).
func (s *Store) scanLockedRead(rows pgx.Rows, c *Claim, t *claimTry) (*claimResult, error) {
	var res *claimResult
	for rows.Next() {
		sc := &readScan{}
		r, stored := &sc.r, &sc.stored
		if err := rows.Scan(&r.sameFP, &sc.state, &stored.status, &stored.headers, &stored.body, &stored.reference,
			&sc.expires, &sc.now); err != nil {
			return nil, err
		}
		res = nil
		if sc.state != string(KeyComplete) {
			t.inFlight = true
			continue
		}
		var err error
		if res, err = s.answer(sc, c, t); err != nil {
			return nil, err
		}
	}
	return res, rows.Err()
}

// readScan is a row of the claim's read as scanned: every column in one allocation (a variable
// whose address Scan takes lives on the heap), the times as pgtype values, without a wrapper per
// column.
type readScan struct {
	r                                   readRow
	state                               string
	stored                              storedOutcome
	leaseExpires, created, expires, now pgtype.Timestamptz
}

// answer is the claim's answer from the row sc: nil when the request may take it, and records
// in t what the claim under the key's lock needs of any row found.
func (s *Store) answer(sc *readScan, c *Claim, t *claimTry) (*claimResult, error) {
	r, stored := &sc.r, &sc.stored
	r.leaseExpires, r.created = finite(sc.leaseExpires), finite(sc.created)
	r.expires, r.now = finite(sc.expires), finite(sc.now)
	r.complete, r.uncertain = sc.state == string(KeyComplete), sc.state == string(KeyUncertain)
	fresh := r.fresh()
	t.found, t.fresh, t.rowAttempt = true, fresh, r.attempt
	switch {
	case r.takeable(fresh):
		return nil, nil
	case !r.sameFP:
		return &claimResult{status: claimKeyReused}, nil
	case r.complete:
		o, err := stored.decode()
		if err != nil {
			return nil, err
		}
		return &claimResult{status: claimReplayed, outcome: o, final: wholeMillis(r.expires.Sub(r.now))}, nil
	case r.uncertain:
		return &claimResult{status: claimUncertain}, nil
	case r.providerCalled && !r.leaseExpires.After(r.now):
		// Its holder called a provider and is gone: never taken over, turned uncertain.
		return &claimResult{status: claimUncertain, abandoned: true, rowAttempt: r.attempt}, nil
	}
	left := r.leaseLeft()
	// How long the holder has run: since the key's first claim, or, after a takeover (whose
	// claim time the row does not keep), at least since its last renewal.
	elapsed := wholeMillis(r.now.Sub(r.created))
	if r.attempt > 1 {
		elapsed = max(c.Lease-left, 0)
	}
	return &claimResult{status: claimInProgress, retryAfter: s.retryIn(c.Operation, elapsed, left)}, nil
}

// readRow is the key's row as the claim's read returns it (sql/claim_read.sql), with the read's
// own clock: the times the answer needs are worked out from it, to the millisecond, as
// PostgreSQL would have (the lease's time left rounded up, the others down, none below zero).
type readRow struct {
	attempt                        int32
	sameFP, complete, uncertain    bool
	providerCalled                 bool // provider_at is set: its holder asked for a provider key
	leaseExpires, created, expires time.Time
	now                            time.Time // statement_timestamp() of the read
}

// finite is t as a time.Time that compares with others as PostgreSQL compares t: 'infinity'
// (which pgx returns with a zero Time) later than any time, '-infinity' earlier. The runtime
// never writes either, but an operator may (expires_at = 'infinity' to remember a key for good),
// and Go must then agree with the statements, which compare in SQL.
func finite(t pgtype.Timestamptz) time.Time {
	switch t.InfinityModifier {
	case pgtype.Infinity:
		return farFuture
	case pgtype.NegativeInfinity:
		return farPast
	}
	return t.Time
}

// farFuture and farPast stand for 'infinity' and '-infinity': beyond the years PostgreSQL's
// timestamps can hold (4713 BC to 294276 AD). A duration to either saturates (time.Time.Sub).
var (
	farFuture = time.Date(300000, time.January, 1, 0, 0, 0, 0, time.UTC)
	farPast   = time.Date(-5000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// fresh says the row behaves as a new key: its TTL has run out and nobody holds it
// (sql/fragments.sql's "expired"). An uncertain row is never fresh.
func (r *readRow) fresh() bool {
	return !r.expires.After(r.now) && (r.complete || (!r.uncertain && !r.leaseExpires.After(r.now)))
}

// takeable says the request may take the row: it is fresh, or its holder's lease ran out on the
// same request and no provider call was recorded on it (sql/fragments.sql's "takeover"). A
// different request can never take over a live key's history.
func (r *readRow) takeable(fresh bool) bool {
	return fresh || (!r.complete && !r.uncertain && !r.leaseExpires.After(r.now) && r.sameFP && !r.providerCalled)
}

// leaseLeft is how long the holder's lease has left, rounded up to the millisecond.
func (r *readRow) leaseLeft() time.Duration {
	d := r.leaseExpires.Sub(r.now)
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Millisecond { // 'infinity': Sub saturated, and rounding up would overflow
		return d.Truncate(time.Millisecond)
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// wholeMillis is d rounded down to the millisecond, at least 0: a time the read's row says, as
// the statements once computed it in SQL (greatest(0, floor(… * 1000))).
func wholeMillis(d time.Duration) time.Duration {
	return max(d, 0).Truncate(time.Millisecond)
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

// releaseRow deletes c's row if c still owns it; gone says it did. The waiting duplicates are
// told in a statement of its own (see sql/release.sql).
//
// It is the one place that decides what becomes of a given-back claim's row: for a claim that
// keeps a history, releaseWithHistory (which, under UncertainOnLoss, turns a row marked by a
// provider call uncertain instead of deleting it); otherwise the bare DELETE.
func (s *Store) releaseRow(ctx context.Context, c *Claim) (gone bool, err error) {
	var n int
	if c.history {
		gone, err = s.releaseWithHistory(ctx, c)
		if gone {
			n = 1
		}
	} else {
		n, err = s.returned(ctx, s.sql.release, c.args()...)
	}
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
		return false, storeError(ctx, "release", err)
	}
	if n == 0 {
		return false, nil
	}
	s.notifyWaiters(ctx, c)
	return true, nil
}

// renew extends c's lease by c.Lease from now; ErrLeaseLost if c no longer owns the key.
func (s *Store) renew(ctx context.Context, c *Claim) error {
	n, err := s.returned(ctx, s.sql.renew, c.args(interval(c.Lease))...)
	if err != nil {
		return storeError(ctx, "renew lease", err)
	}
	if n == 0 {
		s.emit(ctx, Event{Kind: EventLeaseLost, Operation: c.Operation, KeyHash: c.hash()})
		if c.history {
			s.rareHistory(ctx, c.row, c.event(EventLeaseLost))
		}
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
