package idem

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// stmtSet is what a claim path sends where plain PostgreSQL (a pooler in front of it included)
// and Citus differ: a value of the settled topology (topology.set), so that a path sends its
// set's statements and never asks which topology it is on. The two sets differ in four ways
// (topology.go says why):
//
//   - guards: plain PostgreSQL's set sends the statements that fail on purpose to skip the rest
//     of a batch (the full claim's guarded read, its owner guard, transaction mode's replay
//     guard); Citus's sends none, and the answers of the statements that then run decide the same;
//   - settings: a SET LOCAL must reach the worker that commits on Citus, so its set turns the
//     propagation of SET LOCAL on first;
//   - lease mode's fast claim: plain PostgreSQL's sets the asynchronous commit inside its insert
//     (sql/claim_fast_lease.sql); Citus's sends the settings as statements, and the replay check
//     ahead of the claim's transaction;
//   - the completion: Citus cannot plan the completion's fence (sql/complete.sql, an UPDATE in
//     a WITH) generically ("could not create distributed plan"), so where sessions force generic
//     plans (plan_cache_mode = force_generic_plan) its set asks for a custom plan first.
type stmtSet interface {
	// fastLease queues lease mode's fast claim of c (Store.fastClaimAndBegin), up to its
	// history: the claim's transaction opened with its settings, the insert (the rows it
	// returned counted in won) and the replay check (its answer in done).
	fastLease(s *Store, b *batch, c *Claim, won *int, done **peeked)
	// fullRead queues the full claim's read of c (Store.queueClaim), whose answer goes to t.
	fullRead(s *Store, b *batch, c *Claim, t *claimTry, args []any)
	// ownerGuard queues, behind the full claim's COMMIT, the guard that fails unless the
	// committed claim is c's (sql/owner_guard.sql).
	ownerGuard(s *Store, b *batch, c *Claim)
	// replayGuard queues, behind transaction mode's replay check, the guard that fails when a
	// completed row is there, skipping the begin and the claim (sql/replay_guard.sql); passed
	// is set when it ran and passed.
	replayGuard(s *Store, b *batch, c *Claim, passed *bool)
	// asyncCommit and syncCommit are the statements that make the transaction commit
	// asynchronously or synchronously.
	asyncCommit() []string
	syncCommit() []string
	// beforeComplete are the statements sent, in the business transaction, ahead of the
	// completion.
	beforeComplete() []string
	// keepsOwed says a business transaction begun for nothing may stay open on its connection
	// for the connection's next batch to roll back (owed.go).
	keepsOwed() bool
}

var (
	plainAsync = []string{asyncCommitSQL}
	plainSync  = []string{syncCommitSQL}
	citusAsync = []string{propagateSetSQL, asyncCommitSQL, customPlanSQL}
	citusSync  = []string{propagateSetSQL, syncCommitSQL, customPlanSQL}
	citusCompl = []string{customPlanSQL}
)

// customPlanSQL makes the rest of the transaction plan each statement with its parameters
// (a custom plan), whatever the session's plan_cache_mode.
const customPlanSQL = `SET LOCAL plan_cache_mode = force_custom_plan`

// plainSet is plain PostgreSQL's statement set, also sent through a transaction-mode pooler.
type plainSet struct{}

func (plainSet) fastLease(s *Store, b *batch, c *Claim, won *int, done **peeked) {
	b.Queue(beginSQL)
	b.Queue(s.sql.claimFastLease, c.claimArgs()...).Query(counting(won))
	b.Queue(s.sql.replay, c.rowArgs()...).Query(func(rows pgx.Rows) (err error) {
		*done, err = s.scanPeek(rows)
		return err
	})
}

// fullRead queues the read and its guard in one statement (sql/claim_read_guarded.sql): the
// key's row, then, when nobody may take it, the guard's error, which skips the rest of b and
// leaves t.read as the answer.
func (plainSet) fullRead(s *Store, b *batch, c *Claim, t *claimTry, args []any) {
	b.Queue(s.sql.claimReadGuarded, args...).Query(func(rows pgx.Rows) (err error) {
		t.read, err = s.scanRead(rows, c, t)
		t.refused = t.read != nil && failedOnPurpose(err)
		return err
	})
}

func (plainSet) ownerGuard(s *Store, b *batch, c *Claim) {
	b.Queue(s.sql.ownerGuard, c.args()...)
}

func (plainSet) replayGuard(s *Store, b *batch, c *Claim, passed *bool) {
	b.Queue(s.sql.replayGuard, c.rowArgs()...).Exec(func(pgconn.CommandTag) error {
		*passed = true
		return nil
	})
}

func (plainSet) asyncCommit() []string    { return plainAsync }
func (plainSet) syncCommit() []string     { return plainSync }
func (plainSet) beforeComplete() []string { return nil }
func (plainSet) keepsOwed() bool          { return true }

// citusSet is Citus's statement set: no guard, settings propagated to the worker.
type citusSet struct{}

func (citusSet) fastLease(s *Store, b *batch, c *Claim, won *int, done **peeked) {
	b.Queue(s.sql.replay, c.rowArgs()...).Query(func(rows pgx.Rows) (err error) {
		*done, err = s.scanPeek(rows)
		return err
	})
	s.leaseSettings(b)
	b.Queue(s.sql.claimFast, c.claimArgs()...).Query(counting(won))
}

// fullRead queues the read alone (sql/claim_read.sql): a row nobody may take is t.read, and
// the write behind it writes nothing.
func (citusSet) fullRead(s *Store, b *batch, c *Claim, t *claimTry, args []any) {
	b.Queue(s.sql.claimRead, args...).Query(func(rows pgx.Rows) (err error) {
		t.read, err = s.scanRead(rows, c, t)
		return err
	})
}

func (citusSet) ownerGuard(*Store, *batch, *Claim)         {}
func (citusSet) replayGuard(*Store, *batch, *Claim, *bool) {}
func (citusSet) asyncCommit() []string                     { return citusAsync }
func (citusSet) syncCommit() []string                      { return citusSync }
func (citusSet) beforeComplete() []string                  { return citusCompl }

// keepsOwed is false: the transaction may hold a connection to a worker (the replay check ran
// there), so it is rolled back at once, as docs/citus.md says.
func (citusSet) keepsOwed() bool { return false }
