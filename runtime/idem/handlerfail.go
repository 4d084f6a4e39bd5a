package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrHandlerAborted: the handler returned an answer, but a statement it ran in its transaction
// had failed and it went on without rolling that statement back (to a savepoint), so
// PostgreSQL refuses everything after it in the transaction (SQLSTATE 25P02, "current
// transaction is aborted"). Neither the handler's work nor its answer could be committed: the
// work was rolled back and the key given back ([EventHandlerFailed]). It is the handler's
// failure, not the store's: the database is up. To turn an expected failure (a unique
// violation the handler answers with a 400) into an answer, run the statement inside a
// savepoint, a nested transaction begun with tx.Begin, and roll the savepoint back when it
// fails; the rest of the transaction then commits with the answer.
var ErrHandlerAborted = errors.New("idem: a statement of the handler failed and left its transaction aborted")

// txAborted says that tx's connection reports its transaction as failed: a statement in it
// failed and was not rolled back to a savepoint. PostgreSQL says so in every ReadyForQuery
// message, which pgx keeps, so asking costs no round trip.
func txAborted(tx pgx.Tx) bool {
	c := tx.Conn()
	return c != nil && !c.IsClosed() && c.PgConn().TxStatus() == 'E'
}

// handlerAborted gives back the work of a handler that answered with its transaction aborted,
// reports it, and returns the error saying so (an ErrHandlerAborted; an HTTP server answers it
// like any other handler failure, a 500 that names no statement).
func (s *Store) handlerAborted(ctx context.Context, tx *bizTx, c *Claim, mode ClaimMode, start time.Time) error {
	s.giveBack(ctx, tx, c, mode, EventHandlerFailed, start, giveBackWhy(EventHandlerFailed, nil, false))
	s.log.WarnContext(ctx, "idem: a statement of the handler failed and aborted its transaction, yet the handler answered; its work was rolled back and the key released "+
		"(run a statement that may fail, such as an insert that may violate a unique constraint, inside a savepoint: tx.Begin, then roll it back on the error)",
		"operation", c.Operation, "key_hash", c.hash(), "duration", time.Since(start))
	return fmt.Errorf("%w (operation %s): its work was rolled back and the key released", ErrHandlerAborted, c.Operation)
}
