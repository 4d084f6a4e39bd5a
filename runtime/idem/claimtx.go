package idem

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Transaction mode's claim on the key's row (txRowLock, Store.claimTx): the row inserted or
// taken over inside the business transaction, whose row lock duplicates wait on. The claim under
// the key's advisory lock (txAdvisoryLock) is in claimlock.go.

// claimTx begins the business transaction and claims in it (claim: transaction), in one
// round trip when the Store holds the connection: the begin, a transaction-local lock_timeout
// that bounds the wait for a concurrent holder's transaction, the claim, and the caller's
// lock_timeout restored. The attempt's locked says the wait ran out; its tx is then aborted.
// Its tx is set whenever it was begun (the caller ends it unless it owns the key).
//
// Ahead of the begin, the same round trip checks for a remembered completed row (sql/replay.sql):
// a replay then needs neither the transaction nor its rollback. Behind it goes the fast claim
// (sql/claim_fast.sql), a plain insert; only when the key already has a row does the full claim
// follow, in the same transaction, in a second round trip. That is the claim on Citus and without
// a pool; on plain PostgreSQL through a pool the claim is the key's advisory lock instead
// (claimLocked), which writes no row before the completion.
func (s *Store) claimTx(ctx context.Context, p *DoParams, wait time.Duration) attempt {
	c := s.newClaim(ctx, p)
	for try := 1; ; try++ {
		a, again := s.claimTxOnce(ctx, c, p, lockWaitFor(wait), try == 1)
		if !again {
			return a
		}
		if try >= claimTries {
			return attempt{c: c, res: &claimResult{status: claimInProgress, retryAfter: time.Second}, locked: true}
		}
	}
}

// txTry is what one try of claimTx's statements found.
type txTry struct {
	claimTry
	done         *peeked // the replay check's row (sql/replay.sql), when it found one
	replayPassed bool    // the replay check's guard ran, and found no completed row
	won          int     // rows the fast claim inserted; -1 when none was sent
	checked      bool    // the replay check and the fast claim were sent ahead of the full claim
}

// claimTxOnce is one try of claimTx; check says the replay check and the fast claim go ahead
// (the first try, through a pool). again says the key changed under the try: claim again.
func (s *Store) claimTxOnce(ctx context.Context, c *Claim, p *DoParams, bound string, check bool) (a attempt, again bool) {
	a = attempt{c: c, sent: time.Now()}
	t := &txTry{won: -1}
	full := func(b *batch) { s.queueClaim(b, c, p, &t.claimTry, nil) }
	var ahead func(b *batch)
	claim := func(b *batch) { boundLockWait(b, bound, true, full) }
	if _, pooled := s.db.(acquirer); check && pooled { // without a pool, nothing goes ahead
		t.checked = true
		ahead = func(b *batch) {
			b.Queue(s.sql.replay, c.rowArgs()...).Query(func(rows pgx.Rows) (err error) {
				t.done, err = s.scanPeek(rows)
				return err
			})
			s.set().replayGuard(s, b, c, &t.replayPassed)
		}
		claim = func(b *batch) {
			boundLockWait(b, bound, true, func(b *batch) {
				t.won = 0
				b.Queue(s.sql.claimFast, c.claimArgs()...).Query(counting(&t.won))
			})
		}
	}
	var err error
	a.tx, err = s.beginWith(ctx, ahead, claim)
	if err == nil && t.done != nil && !t.replayPassed {
		// No replay guard ran (Citus's set has none), and the replay check found a remembered
		// completed row (the fast claim wrote nothing); tx is begun, and the caller rolls it
		// back. (Behind a replay guard, the same row failed the batch.)
		return s.replayed(ctx, a, t.done, p), false
	}
	if err == nil && t.won == 0 {
		// The key has a row: the full claim decides, in the same transaction (the caller's
		// lock_timeout is saved already).
		b := newBatch()
		boundLockWait(b, bound, false, full)
		err = a.tx.SendBatch(ctx, &b.Batch).Close()
	}
	return s.decideTx(ctx, a, t, p, err)
}

// decideTx is claimTxOnce's answer from what its statements found (t) and their error.
func (s *Store) decideTx(ctx context.Context, a attempt, t *txTry, p *DoParams, err error) (attempt, bool) {
	c := a.c
	switch {
	case t.checked && !t.replayPassed && failedOnPurpose(err):
		// The guard found a completed row: the begin and the claim were skipped.
		if t.done == nil {
			// It completed between the check and its guard: check again, the plain way.
			s.rollback(ctx, a.tx)
			return a, true
		}
		return s.replayed(ctx, a, t.done, p), false
	case pgCode(err) == "55P03": // lock_not_available: the wait ran out
		a.res, a.locked = &claimResult{status: claimInProgress, retryAfter: time.Second}, true
	case t.refused, err == nil && t.won != 1 && !t.wrote && t.read != nil:
		// A row nobody may take: the read's answer (the caller rolls tx back).
		a.res = t.read
	case err == nil && t.won != 1 && !t.wrote:
		// The row changed between the read and the write: claim again, in a new transaction.
		s.rollback(ctx, a.tx)
		return a, true
	case err != nil:
		a.err = storeError(ctx, "claim in transaction", err)
	case t.won == 1:
		// The fast claim inserted the key: new, in flight, this request's.
		c.Attempt = 1
		a.res = &claimResult{status: claimAcquired, claim: c}
	default:
		a.res = t.owned(c)
	}
	return a, false
}

// replayed is a's answer from a remembered completed row: the replay, or key reused.
func (s *Store) replayed(ctx context.Context, a attempt, done *peeked, p *DoParams) attempt {
	var err error
	if a.res, err = done.result(p.Fingerprint); err != nil {
		a.err = storeError(ctx, "replay check", err)
	}
	return a
}

// boundLockWait queues what q queues under the claim's lock wait bound (a lockWaitSQL
// statement), with the caller's lock_timeout saved first (save) and put back behind.
func boundLockWait(b *batch, bound string, save bool, q func(b *batch)) {
	if save {
		b.Queue(lockWaitSave)
	}
	b.Queue(bound)
	q(b)
	b.Queue(lockWaitDefault)
	b.Queue(lockWaitRestore)
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
