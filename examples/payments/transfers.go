package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
)

// Transfers show the outcome a retry cannot settle. createTransfer calls the bank while the
// request waits, with a key derived from the request (idem.ProviderKey). The bank's answer can
// be lost: the bank charged, but the handler saw a timeout. The operation is declared
// uncertainOnLoss in openapi.yaml, so the runtime recorded the bank call before it was made, and
// a lost attempt turns the key uncertain: retries are answered 409 operation-uncertain instead
// of calling the bank again, until reconciliation against the bank's daily report (reconcile.go)
// or an operator (idemgen keys resolve) settles it.

// transferProvider names the bank's transfers for ProviderKey: the provider whose daily report
// reconciliation reads (GET /reports/charges?purpose=transfer).
const transferProvider = "bank:transfers"

// bankTimeout bounds a transfer's call to the bank; past it the answer counts as lost.
const bankTimeout = 5 * time.Second

const transferColumns = `transfer_id, account, amount_minor, currency, bank_charge_id, created_at`

func scanTransfer(row pgx.Row) (api.Transfer, error) {
	var t api.Transfer
	err := row.Scan(&t.TransferId, &t.Account, &t.AmountMinor, &t.Currency, &t.BankChargeId, &t.CreatedAt)
	return t, err
}

// CreateTransfer charges the bank for the transfer and records it.
func (s *payments) CreateTransfer(ctx context.Context, tx pgx.Tx, req api.CreateTransferRequestObject) (api.CreateTransferResponseObject, error) {
	tenant, key, err := claimed(ctx)
	if err != nil {
		return nil, err
	}
	if s.bank == nil {
		// Not stored (5xx): the key is given back, and a retry once a bank is configured runs.
		return problem(http.StatusServiceUnavailable, "bank-unavailable", "No bank configured",
			"this server was started without a bank to transfer through"), nil
	}
	b := req.Body
	// Recorded before the call, durably: from here on, losing this attempt makes the key
	// uncertain. An error means the bank must not be called (the claim was lost, or the record
	// could not be written).
	bankKey, err := idem.ProviderKey(ctx, idem.ProviderCall{Provider: transferProvider, Amount: b.AmountMinor, Currency: b.Currency})
	if err != nil {
		return nil, err
	}
	chargeID, err := s.bank.charge(ctx, bankKey, chargeRequest{Account: b.Account, AmountMinor: b.AmountMinor, Currency: b.Currency, Purpose: purposeTransfer})
	if errors.Is(err, errDeclined) {
		return problem(http.StatusPaymentRequired, "declined", "Declined by the bank", err.Error()), nil
	}
	if err != nil {
		// The bank may have charged: the runtime turns the key uncertain.
		return nil, fmt.Errorf("transfers: the bank's answer is lost: %w", err)
	}
	t, err := insertTransfer(ctx, tx, tenant, key, b.Account, b.AmountMinor, b.Currency, chargeID, "handler")
	if err != nil {
		return nil, err
	}
	return api.CreateTransfer201JSONResponse(t), nil
}

// insertTransfer writes the transfer the bank charged, named after the request's key.
func insertTransfer(ctx context.Context, tx pgx.Tx, tenant, key, account string, amount int64, currency, chargeID, settledBy string) (api.Transfer, error) {
	id := derivedID("tr_", tenant, key)
	t, err := scanTransfer(tx.QueryRow(ctx, `
		INSERT INTO transfers (tenant_id, transfer_id, account, amount_minor, currency, bank_charge_id, settled_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING `+transferColumns, tenant, id, account, amount, currency, chargeID, settledBy))
	if err != nil {
		return api.Transfer{}, fmt.Errorf("transfers: record transfer %s: %w", id, err)
	}
	return t, nil
}

func (p problemResponse) VisitCreateTransferResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

var _ api.CreateTransferResponseObject = problemResponse{}
