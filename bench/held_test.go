package bench

import (
	"context"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// heldTx is a transaction whose batches are held instead of sent: the hand-written peers run
// the example's work (payments.CreatePaymentTx, which sends its two inserts as one batch when no
// runtime claim is there to take them) on it, then send what it held in front of the key's row
// and the COMMIT, in one round trip. That is what a careful hand-written handler does with
// writes whose answers it does not read, and what claim: transaction and claim: lease do with
// the writes the example defers (idem.Defer): the peers make the same round trips as the
// generated servers, so that what separates them is the rest.
type heldTx struct {
	pgx.Tx
	held []*pgx.QueuedQuery
}

// SendBatch holds b's statements; their results are never read (the batch answers nothing).
func (h *heldTx) SendBatch(_ context.Context, b *pgx.Batch) pgx.BatchResults {
	h.held = append(h.held, b.QueuedQueries...)
	return heldResults{}
}

// queueHeld puts the held statements in front of what b holds already.
func (h *heldTx) queueHeld(b *pgx.Batch) {
	b.QueuedQueries = append(h.held[:len(h.held):len(h.held)], b.QueuedQueries...)
}

// heldResults answers a held batch: nothing was sent, so nothing failed yet.
type heldResults struct{}

func (heldResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, nil }
func (heldResults) Query() (pgx.Rows, error) {
	return nil, errors.New("bench: a held batch has no rows to read")
}
func (heldResults) QueryRow() pgx.Row { return heldRow{} }
func (heldResults) Close() error      { return nil }
func (heldResults) Tx() pgx.Tx        { return nil } // the held batch began no transaction

type heldRow struct{}

func (heldRow) Scan(...any) error { return errors.New("bench: a held batch has no row to read") }

// heldRefusal is the answer to the example's work refused when its held writes were sent: a
// payment that exists already (the key made it, and its record is gone), as the example's own
// Refuse answers it; nil for any other failure.
func heldRefusal(err error) *idemhttp.Problem {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.TableName == "payments" {
		return idemhttp.NewProblem(http.StatusUnprocessableEntity, idemhttp.CodeKeyReused,
			"this Idempotency-Key already made a payment and its record has expired")
	}
	return nil
}
