package idem

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimLocked is the transaction-mode claim on plain PostgreSQL through a pool (txAdvisoryLock): the claim is a transaction-scoped
// advisory lock on the key, and the key's row is written once, at the completion, with the
// outcome (sql/complete_insert.sql) — where the row-lock claim inserts the row at the claim and
// updates it at the completion. One round trip sends the lock's try (sql/claim_lock.sql), the
// claim's read (sql/claim_read_locked.sql: the row is authoritative; it has what a completed
// row's answer needs, and a row in flight, found only where lease mode claims the same key, is
// read again whole in a second round trip, readWhole), and the BEGIN that makes the implicit
// transaction holding the lock the business transaction:
//
//   - the lock taken, and no row or one this request may take (expired, or an abandoned lease of
//     the same request): tx is open, the lock held, and the caller owns the key;
//   - a row nobody may take (completed: a replay or a mismatch; a lease-mode claim in flight):
//     the read's row is the answer, and tx, open for nothing, is rolled back by the connection's
//     next batch (owed.go). A key with a remembered completed row is not locked at all, and is
//     read past a lock somebody holds: a replay never waits for one, and nobody waits for a
//     replay's rollback;
//   - the lock held by somebody else, and no completed row: the contended claim
//     (claimContended) waits for the holder in a second round trip, and its read answers; when
//     the holder left the key takeable (it rolled back), the claim starts over, within the same
//     wait.
//
// No statement fails on purpose: an error costs PostgreSQL far more than the ROLLBACK a replay
// pays instead (about 50 µs of CPU, and a line in the server's log; TestClaimsRaiseNothing), and
// a replay is an everyday request. So a new key pays one statement for the lock and no setting,
// a replay the same one round trip (its ROLLBACK rides in the connection's next batch), and only
// a key somebody holds pays the wait's.
func (s *Store) claimLocked(ctx context.Context, p *DoParams, wait time.Duration) attempt {
	// The claim's batch sends no token: only an owner needs one (for its completion), and
	// it gets it below, so a replay or a mismatch makes none.
	c := newClaimWith(s, p, pgtype.UUID{}, false)
	c.locked, c.fingerprint = true, p.Fingerprint
	s.hashIfObserved(ctx, c)
	a := attempt{c: c, sent: time.Now()}
	t, err := s.lockAndRead(ctx, &a, wait)
	switch {
	case err == nil && t.read == nil && !t.lockTaken:
		// The holder left the key takeable every time the wait ended: in progress.
		a.res, a.locked = &claimResult{status: claimInProgress, retryAfter: time.Second}, true
	case pgCode(err) == "55P03": // lock_not_available: the wait ran out
		a.res, a.locked = &claimResult{status: claimInProgress, retryAfter: time.Second}, true
	case err != nil:
		a.err = storeError(ctx, "claim in transaction", err)
	case t.read != nil:
		// A row nobody may take: the read's answer. tx, when open, the caller hands on (owed.go).
		a.res = t.read
	case t.found && !t.fresh:
		// An abandoned lease of the same request: taken over. Its row is rewritten at the
		// completion, and only if nobody took it meanwhile.
		c.Attempt, c.takeover = int(t.rowAttempt)+1, true
		a.res = &claimResult{status: claimTakenOver, claim: c}
	default:
		// No row, or an expired one (a fresh history: attempt 1, the row rewritten).
		c.Attempt, c.takeover = 1, t.found
		a.res = &claimResult{status: claimAcquired, claim: c}
	}
	if a.res != nil && a.res.status.owns() {
		c.token = newToken()
		c.argv[3] = c.token
	}
	return a
}

// lockAndRead is claimLocked's round trips: the lock's try and the read, and, while the lock is
// held by somebody else, the contended claim, at most claimTries times within wait. a.tx is the
// transaction the last round trip left open, if any.
func (s *Store) lockAndRead(ctx context.Context, a *attempt, wait time.Duration) (t claimTry, err error) {
	c := a.c
	// The statements share tenant, scope and key: one slice, each boxed once.
	rowArgs := c.read
	lock := s.lockOf(c.row)
	c.lockArg[3] = lock
	deadline := a.sent.Add(wait) // every contended wait of this claim shares wait
	for try := 1; ; try++ {
		t = claimTry{}
		a.tx, err = s.beginWith(ctx, func(b *batch) {
			b.Queue(s.sql.claimLock, c.lockArg...).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					if err := rows.Scan(&t.lockTaken); err != nil {
						return err
					}
				}
				return rows.Err()
			})
			b.Queue(s.sql.claimReadLocked, rowArgs...).Query(func(rows pgx.Rows) (err error) {
				t.read, err = s.scanLockedRead(rows, c, &t)
				return err
			})
		}, nil)
		if err == nil && t.inFlight {
			// A row in flight, which the narrower read cannot answer: read it whole, in the
			// transaction the batch began (under the lock, when it was taken).
			t = claimTry{lockTaken: t.lockTaken}
			err = s.readWhole(ctx, a.tx, c, &t, rowArgs)
		}
		if err != nil || t.read != nil || t.lockTaken {
			return t, err
		}
		// The lock is held by somebody else, and the read found no row that answers without it
		// (none, or one that may be taken: nothing is owned without the lock). The contended claim
		// waits for the lock and reads what its holder left.
		t = claimTry{}
		err = s.claimContended(ctx, a.tx, c, &t, lock, rowArgs, max(time.Until(deadline), time.Millisecond))
		a.tx = nil // claimContended gave the connection back
		if err != nil || t.read != nil || try >= claimTries {
			// Past claimTries, the holder left the key takeable every time (it rolled back):
			// nothing answers and no lock is held, and the claim is in progress (claimLocked).
			return t, err
		}
		// The holder left the key takeable (it rolled back): the lock ended with the wait's round
		// trip, so the claim starts over, and a new holder makes this request wait again.
	}
}

// claimContended is claimLocked's second round trip, when the key's lock was held and the read
// found no row that answers without it (none, or one that may be taken): on the first round trip's
// connection (first, whose BEGIN left a transaction open), its ROLLBACK, the lock with its wait
// bounded by wait (sql/claim_lock_wait.sql), and the read behind it (t). Nothing begins: the wait
// is for the holder's outcome, which the read then sees, and the lock ends with the round trip.
// A concurrent holder's commit or rollback wakes the wait at once; a wait that runs out (after
// txLockWait at least, unless the duplicate's own wait was about to end) fails with
// lock_not_available, and the duplicate then sleeps until the holder's notification, which the
// holder sends only after a hold that long (sql/notify_locked.sql). The connection goes back to
// the pool before it returns, its transaction ended.
func (s *Store) claimContended(ctx context.Context, first *bizTx, c *Claim, t *claimTry, lock int64, rowArgs []any, wait time.Duration) error {
	bound := strconv.FormatInt(millis(wait), 10) + "ms"
	conn := first.conn
	first.conn = nil
	b := newBatch()
	b.Queue(rollbackSQL)
	b.Queue(s.sql.claimLockWait, lock, bound).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(nil); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	s.queueRead(b, c, t, rowArgs)
	err := conn.SendBatch(ctx, &b.Batch).Close()
	endConn(ctx, conn) // a transaction is still open only when nothing was sent (ctx had ended)
	return err
}

// readWhole is claimLocked's second round trip when the read behind the lock found a row in
// flight (sql/claim_read_locked.sql leaves out what its answer needs): the claim's whole read
// (sql/claim_read.sql) on tx, the transaction the first round trip began.
func (s *Store) readWhole(ctx context.Context, tx *bizTx, c *Claim, t *claimTry, rowArgs []any) error {
	b := newBatch()
	s.queueRead(b, c, t, rowArgs)
	return tx.conn.SendBatch(ctx, &b.Batch).Close()
}

// lockOf is the advisory lock id of the key row r (lockFrom), or in the tests that check that keys
// sharing an id only wait for each other, one id for every key of the Store (its table's, so
// that tests running at once on their own tables do not share it).
func (s *Store) lockOf(r rowID) int64 {
	if s.oneLock {
		r = rowID{}
	}
	return lockFrom(s.lockSeed, r)
}

// FNV-1a's 64-bit offset basis and prime.
const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

// lockSeed is FNV-1a's state after table's name: what every lock id of the table starts from,
// worked out once per Store (Store.lockSeed), not once per claim.
func lockSeed(table string) uint64 {
	h := uint64(fnvOffset)
	for j := 0; j < len(table); j++ {
		h = (h ^ uint64(table[j])) * fnvPrime
	}
	return h
}

// lockFrom is the advisory lock id of the key row r of the table whose lockSeed is seed: 64 bits
// of FNV-1a over the table's name and the row's stored tenant, scope and key, NUL-separated
// (stored text holds no NUL). Two keys with one id only wait for each other: the row decides
// every answer. Every version of the runtime must give a key the same id, or two of them running
// at once (a rolling deploy) would not wait for each other: TestLockIDIsStable pins it.
func lockFrom(seed uint64, r rowID) int64 {
	h := seed
	for _, part := range [...]string{r.tenant, r.scope, r.key} {
		h *= fnvPrime // a NUL byte between parts: h ^ 0 is h
		for j := 0; j < len(part); j++ {
			h = (h ^ uint64(part[j])) * fnvPrime
		}
	}
	return int64(h)
}
