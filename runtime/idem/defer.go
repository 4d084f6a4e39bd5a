package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Write is a statement a handler hands to [Defer]: it runs in the handler's transaction after
// the handler returns, in the round trip that stores the key's outcome and commits. SQL is one
// statement: a batch reads one result per statement, and behind a pooler that sends batches as
// one simple query, a second statement in one Write would shift every result after it.
type Write struct {
	SQL  string
	Args []any
	// Refuse, when not nil, turns the statement's failure (PostgreSQL refused it: a unique
	// violation, a check constraint) into the error the request fails with, such as an
	// *idemhttp.Problem for a 422 the client can act on; nil leaves it a failure of the handler.
	// Either way nothing of the run is kept: its work is rolled back and the key given back, so
	// a retry with the same key runs anew and is refused again while the cause stays.
	Refuse func(err *pgconn.PgError) error
}

// ErrDeferAfterRun: Defer was called for a handler's run that had already ended (from a
// goroutine the handler left behind, say). The write was not sent.
var ErrDeferAfterRun = errors.New("idem: Defer called after the handler's run ended: the write was not sent")

// Defer sends writes in tx, the transaction the runtime gave the handler, after the handler
// returns: in the same round trip as the key's outcome and the COMMIT, and before them. A
// handler that knows its answer before its writes are made (its ids and times chosen by itself,
// not read back with RETURNING) then waits for the database once for its writes and its outcome
// together, as a careful hand-written handler does.
//
// Deferred writes run in the order they were deferred, after every statement the handler ran
// itself: defer only statements whose results the handler does not read and that nothing it
// runs later depends on. When one fails, the statements behind it, the outcome and the COMMIT
// do not run: the work is rolled back, the key given back, and the request fails with the
// write's Refuse error, or as with a handler's error (an HTTP server answers 500 internal).
//
// When the runtime cannot send them with the outcome, Defer sends writes at once in tx, in one
// round trip, and returns the first one's failure (turned by its Refuse when PostgreSQL refused
// it): for a request without a key, a Store whose DB is not a *pgxpool.Pool, a transaction
// other than the run's own (a savepoint from tx.Begin), and outside a handler run by the
// runtime. The handler returns that error as it would any other, so the same code is right on
// every path.
func Defer(ctx context.Context, tx pgx.Tx, writes ...Write) error {
	if c, ok := ClaimFromContext(ctx); ok && c.later != nil && c.later.tx == tx {
		return c.later.add(writes)
	}
	if len(writes) == 0 {
		return nil
	}
	b := newBatch()
	ran := 0
	queueDeferred(b, writes, &ran)
	if err := tx.SendBatch(ctx, &b.Batch).Close(); err != nil {
		if failed, ok := deferredFailure(err, writes, ran); ok {
			return failed.err
		}
		return fmt.Errorf("idem: the handler's writes failed: %w", err)
	}
	return nil
}

// refused is err turned by w.Refuse when PostgreSQL refused the statement (an error that means
// the server was lost is not a refusal), else err wrapped as the failure of a deferred write.
func (w *Write) refused(err error) error {
	var pgErr *pgconn.PgError
	if w.Refuse != nil && !lostStore(err) && errors.As(err, &pgErr) {
		if r := w.Refuse(pgErr); r != nil {
			return r
		}
	}
	return fmt.Errorf("idem: a deferred write of the handler failed: %w", err)
}

// deferred is the writes a handler's run deferred, for the one transaction it ran in. It is
// closed when the handler returns (or panics), and the completion then sends what it holds; a
// write deferred after that (by a goroutine outliving the run) is refused.
type deferred struct {
	tx     pgx.Tx
	mu     sync.Mutex
	writes []Write
	closed bool
}

func (d *deferred) add(writes []Write) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrDeferAfterRun
	}
	d.writes = append(d.writes, writes...)
	return nil
}

// take closes d and returns its writes; nil d has none.
func (d *deferred) take() []Write {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	return d.writes
}

// queueDeferred queues writes on b, counting in ran each one that runs: when the batch fails,
// a count below len(writes) names the write that failed.
func queueDeferred(b *batch, writes []Write, ran *int) {
	if len(writes) == 0 {
		return
	}
	count := func(pgconn.CommandTag) error {
		*ran++
		return nil
	}
	for i := range writes {
		b.Queue(writes[i].SQL, writes[i].Args...).Exec(count)
	}
}

// deferredFailed is a completion whose batch stopped at one of the handler's deferred writes:
// PostgreSQL refused it, so nothing behind it ran, the COMMIT included. err is what the request
// fails with (Write.Refuse's error, or the statement's own).
type deferredFailed struct{ err error }

func (e *deferredFailed) Error() string { return e.err.Error() }

func (e *deferredFailed) Unwrap() error { return e.err }

// deferredFailure says that err, a completion batch's error, is the failure of one of writes
// (ran of them having run before it), and returns what the request fails with. It is when
// PostgreSQL refused a write as it ran it (a *pgconn.PgError with ran below len(writes)), or pgx
// could not prepare a write or encode its arguments (pgx.ErrPreprocessingBatch naming its SQL:
// nothing was sent). An error that means the server was lost (lostStore) is not, even from a
// write: the COMMIT may have run, and the caller says so.
func deferredFailure(err error, writes []Write, ran int) (*deferredFailed, bool) {
	if len(writes) == 0 || lostStore(err) {
		return nil, false
	}
	var pre pgx.ErrPreprocessingBatch
	if errors.As(err, &pre) {
		for i := range writes {
			if writes[i].SQL == pre.SQL() {
				return &deferredFailed{writes[i].refused(err)}, true
			}
		}
		return nil, false // one of the runtime's own statements
	}
	var pgErr *pgconn.PgError
	if ran >= len(writes) || !errors.As(err, &pgErr) {
		return nil, false
	}
	return &deferredFailed{writes[ran].refused(err)}, true
}
