package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// The bank's settlement webhook: the bank delivers a charge.settled event for each charge it
// made, signed the Standard Webhooks way, and delivers it again until it gets a 2xx. The spec
// declares the operation a receiver (x-idempotency delivery), so the generated code verifies each
// delivery's signature with the secrets below before it claims the delivery's webhook-id; a
// redelivery is answered with the stored 200 and runs nothing.

// webhookSecretsEnv names the environment variable the server reads the bank's webhook secrets
// from when -bank-webhook-secrets is not given.
const webhookSecretsEnv = "BANK_WEBHOOK_SECRETS"

// splitSecrets reads a comma-separated list of secrets, ignoring empty items.
func splitSecrets(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// ReceiveBankSettlementSecrets gives the generated receiver the secrets the bank signs with:
// more than one while the bank rotates its secret. None answers every delivery 500, so the bank
// delivers again once the server is configured.
func (s *payments) ReceiveBankSettlementSecrets(ctx context.Context) ([]string, error) {
	return s.webhookSecrets, nil
}

// ReceiveBankSettlement records the event and marks the charge's transfer settled: one effect
// per event, in the transaction that completes the delivery's key.
func (s *payments) ReceiveBankSettlement(ctx context.Context, tx pgx.Tx, req api.ReceiveBankSettlementRequestObject) (api.ReceiveBankSettlementResponseObject, error) {
	c, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return nil, errors.New("payments: no claim for the delivery (is the handler wired through api.NewIdempotentServer?)")
	}
	ev := req.Body
	if ev == nil {
		return problemResponse{idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid, "the event body is required")}, nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO bank_settlements (event_id, charge_id, amount_minor, currency) VALUES ($1, $2, $3, $4)`,
		c.Key, ev.ChargeId, ev.AmountMinor, ev.Currency); err != nil {
		return nil, fmt.Errorf("settlements: record event %s: %w", c.Key, err)
	}
	tag, err := tx.Exec(ctx, `UPDATE transfers SET settled_at = coalesce(settled_at, now()) WHERE bank_charge_id = $1`, ev.ChargeId)
	if err != nil {
		return nil, fmt.Errorf("settlements: mark the transfer of charge %s settled: %w", ev.ChargeId, err)
	}
	return api.ReceiveBankSettlement200JSONResponse{EventId: c.Key, ChargeId: ev.ChargeId, TransfersSettled: int(tag.RowsAffected())}, nil
}

func (p problemResponse) VisitReceiveBankSettlementResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

var _ api.ReceiveBankSettlementResponseObject = problemResponse{}
