package idem

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Lease mode's claim: it commits on its own, before the business transaction begins. Two
// paths make it (claimpath.go): leaseOwnTx (Store.claim) and leaseBatch (Store.claimAndBegin).

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
func (s *Store) claim(ctx context.Context, p *DoParams) attempt {
	for try := 1; ; try++ {
		c := s.newClaim(ctx, p)
		sent := time.Now()
		res, err := s.claimOnce(ctx, c, p)
		if err != nil {
			// The answer may have been lost after the claim committed (a broken connection, the
			// caller leaving during the COMMIT): give back exactly this claim, if it was made,
			// or the key would answer in progress for its whole lease.
			s.releaseLost(ctx, c, whyAbandoned)
			return attempt{c: c, err: storeError(ctx, "claim", err)}
		}
		if res == nil { // the row changed under the claim: claim again
			if try < claimTries {
				continue
			}
			res = &claimResult{status: claimInProgress, retryAfter: time.Second}
		}
		return attempt{c: c, res: res, sent: sent}
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
func (s *Store) claimAndBegin(ctx context.Context, p *DoParams) attempt {
	a, decided := s.fastClaimAndBegin(ctx, p)
	if decided {
		return a
	}
	if ctx.Err() != nil { // the caller left, and the fast path made no claim
		a.err = storeError(ctx, "claim and begin", ctx.Err())
		return a
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
func (s *Store) fastClaimAndBegin(ctx context.Context, p *DoParams) (a attempt, decided bool) {
	c := s.newClaim(ctx, p)
	a = attempt{c: c, sent: time.Now()}
	// What the batch's callbacks find, in one variable: they capture it, so it lives on the heap.
	var got struct {
		done      *peeked
		won       int // rows the insert returned: 1 when it inserted the key
		committed bool
	}
	rctx, bound := newBound(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer bound.end()
	tx, err := s.beginSending(ctx, rctx, func(b *batch) {
		s.set().fastLease(s, b, c, &got.won, &got.done)
		s.queueClaimHistory(b, c)
		b.Queue(commitSQL).Exec(statementRan(&got.committed))
	}, nil)
	switch {
	case err == nil && got.won == 1 && got.committed:
		// Claimed and begun.
		c.Attempt = 1
		a.tx, a.res = tx, &claimResult{status: claimAcquired, claim: c}
	case err == nil && got.done != nil:
		// A remembered completed row (the insert wrote nothing), and a business BEGIN to take
		// back: the connection's next batch does (owed.go).
		s.owe(ctx, tx)
		if a.res, err = got.done.result(p.Fingerprint); err != nil {
			a.err = storeError(ctx, "replay check", err)
		}
	case err == nil && got.won == 0:
		// The key has a row the replay check did not answer for: nothing was written, and the
		// full claim decides, on this connection first of all (owed.go), whose business BEGIN
		// its batch takes back.
		s.owe(ctx, tx)
		return a, false
	default:
		if tx != nil {
			s.rollback(ctx, tx)
			// As in fullClaimAndBegin: the answer was lost or a later statement failed, so the
			// claim may have committed; only a row in flight with this request's token goes.
			s.releaseLost(ctx, c, whyAbandoned)
		}
		if err == nil { // the insert won but its commit did not say so: never begin unowned
			err = errors.New("the fast claim's transaction did not commit")
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		a.err = storeError(ctx, "claim and begin", err)
	}
	return a, true
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
func (s *Store) fullClaimAndBegin(ctx context.Context, p *DoParams) attempt {
	for try := 1; ; try++ {
		a, again := s.fullClaimOnce(ctx, p)
		if !again {
			return a
		}
		if try >= claimTries || ctx.Err() != nil {
			a.res = &claimResult{status: claimInProgress, retryAfter: time.Second}
			return a
		}
	}
}

// fullClaimOnce is one try of fullClaimAndBegin; again says the row changed between the read and
// the write: nothing was written, and the claim is tried again.
func (s *Store) fullClaimOnce(ctx context.Context, p *DoParams) (a attempt, again bool) {
	c := s.newClaim(ctx, p)
	a = attempt{c: c, sent: time.Now()}
	var t claimTry
	committed := false
	rctx, bound := newBound(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	tx, err := s.beginSending(ctx, rctx, func(b *batch) {
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
		a.tx, a.res = tx, t.owned(c)
		return a, false
	case err == nil && t.read != nil:
		// Without guards (Citus): a row nobody may take, and a business BEGIN to take back.
		a.res = t.read
	case guarded && committed && t.wrote:
		// Claimed and committed, but the owner guard disagrees: the caller begins on its own.
		a.res = t.owned(c)
	case t.refused:
		// A row nobody may take: the read's answer, and nothing was begun.
		a.res = t.read
	case guarded && committed || err == nil:
		// The row changed between the read and the write: nothing was written; claim again.
		s.rollback(ctx, tx)
		return a, true
	default:
		if tx != nil {
			// The batch's answer was lost (the store timeout ran out, the connection broke) or a
			// later statement failed, so its claim may have committed: give the key back (only a
			// row still in flight with this request's token is deleted), or a retry would wait
			// out the lease.
			s.rollback(ctx, tx)
			s.releaseLost(ctx, c, whyAbandoned)
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		a.err = storeError(ctx, "claim and begin", err)
		return a, false
	}
	s.rollback(ctx, tx)
	return a, false
}
