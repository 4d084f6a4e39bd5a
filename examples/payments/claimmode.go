package payments

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/examples/payments/txapi"
	"github.com/idemgen/idemgen/runtime/idem"
)

// The example serves its API in either claim mode (docs/runtime.md): package api is generated
// from openapi.yaml with claim: lease, package txapi from the same spec with claim: transaction
// (its idemgen.yaml overrides the claim mode). The same handlers serve both; main's -claim flag
// picks one, and the benchmark (bench/) serves both side by side.

// claimModeEnv names the environment variable main reads when -claim is not given.
const claimModeEnv = "CLAIM_MODE"

// parseClaimMode reads a -claim value.
func parseClaimMode(v string) (idem.ClaimMode, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "lease":
		return idem.ClaimLease, nil
	case "transaction":
		return idem.ClaimTransaction, nil
	}
	return 0, fmt.Errorf("claim mode %q: want lease (the claim commits before the handler runs) or transaction (the claim is part of the handler's transaction)", v)
}

// NewIdempotentAPI is the example's API served in claim mode mode, its handlers p (see [NewAPI]).
func NewIdempotentAPI(mode idem.ClaimMode, p api.IdempotentServerInterface, store *idem.Store) http.Handler {
	if mode == idem.ClaimTransaction {
		return txapi.NewIdempotentHandler(txPayments{p}, store, &txapi.IdempotentHandlerOptions{
			Middlewares: []txapi.StrictMiddlewareFunc{validateTx},
		})
	}
	return api.NewIdempotentHandler(p, store, &api.IdempotentHandlerOptions{
		Middlewares: []api.StrictMiddlewareFunc{Validate},
	})
}

// validateTx is the example's validate for txapi's request types, which are package api's
// under other names: it hands validate the same request as package api's type.
func validateTx(next txapi.StrictHandlerFunc, operationID string) txapi.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		pass := func(ctx context.Context, w http.ResponseWriter, r *http.Request, _ any) (any, error) {
			return next(ctx, w, r, request)
		}
		asAPI := request
		switch req := request.(type) {
		case txapi.CreatePaymentRequestObject:
			asAPI = createToAPI(req)
		case txapi.RefundPaymentRequestObject:
			asAPI = refundToAPI(req)
		case txapi.CreateTransferRequestObject:
			asAPI = transferToAPI(req)
		}
		return Validate(pass, operationID)(ctx, w, r, asAPI)
	}
}

func createToAPI(req txapi.CreatePaymentRequestObject) api.CreatePaymentRequestObject {
	return api.CreatePaymentRequestObject{Params: api.CreatePaymentParams(req.Params), Body: (*api.CreatePaymentJSONRequestBody)(req.Body)}
}

func refundToAPI(req txapi.RefundPaymentRequestObject) api.RefundPaymentRequestObject {
	return api.RefundPaymentRequestObject{PaymentId: req.PaymentId, Params: api.RefundPaymentParams(req.Params), Body: (*api.RefundPaymentJSONRequestBody)(req.Body)}
}

// txPayments serves txapi through the example's handlers: the request types convert, and
// package api's response objects already are txapi's (same Visit methods).
type txPayments struct{ p api.IdempotentServerInterface }

var _ txapi.IdempotentServerInterface = txPayments{}

func (t txPayments) CreatePayment(ctx context.Context, tx pgx.Tx, req txapi.CreatePaymentRequestObject) (txapi.CreatePaymentResponseObject, error) {
	return t.p.CreatePayment(ctx, tx, createToAPI(req))
}

func (t txPayments) GetPayment(ctx context.Context, req txapi.GetPaymentRequestObject) (txapi.GetPaymentResponseObject, error) {
	return t.p.GetPayment(ctx, api.GetPaymentRequestObject{PaymentId: req.PaymentId, Params: api.GetPaymentParams(req.Params)})
}

func (t txPayments) CreateTransfer(ctx context.Context, tx pgx.Tx, req txapi.CreateTransferRequestObject) (txapi.CreateTransferResponseObject, error) {
	return t.p.CreateTransfer(ctx, tx, transferToAPI(req))
}

func (t txPayments) ReceiveBankSettlement(ctx context.Context, tx pgx.Tx, req txapi.ReceiveBankSettlementRequestObject) (txapi.ReceiveBankSettlementResponseObject, error) {
	var body *api.ReceiveBankSettlementJSONRequestBody
	if b := req.Body; b != nil {
		body = &api.ReceiveBankSettlementJSONRequestBody{AmountMinor: b.AmountMinor, ChargeId: b.ChargeId, Currency: b.Currency, Type: api.SettlementEventType(b.Type)}
	}
	return t.p.ReceiveBankSettlement(ctx, tx, api.ReceiveBankSettlementRequestObject{Body: body})
}

func (t txPayments) ReceiveBankSettlementSecrets(ctx context.Context) ([]string, error) {
	return t.p.ReceiveBankSettlementSecrets(ctx)
}

func transferToAPI(req txapi.CreateTransferRequestObject) api.CreateTransferRequestObject {
	return api.CreateTransferRequestObject{Params: api.CreateTransferParams(req.Params), Body: (*api.CreateTransferJSONRequestBody)(req.Body)}
}

func captureToAPI(req txapi.CapturePaymentRequestObject) api.CapturePaymentRequestObject {
	return api.CapturePaymentRequestObject{PaymentId: req.PaymentId, Params: api.CapturePaymentParams(req.Params)}
}

func (t txPayments) CapturePayment(ctx context.Context, tx pgx.Tx, req txapi.CapturePaymentRequestObject) (txapi.CapturePaymentResponseObject, string, error) {
	return t.p.CapturePayment(ctx, tx, captureToAPI(req))
}

func (t txPayments) ReplayCapturePayment(ctx context.Context, req txapi.CapturePaymentRequestObject, reference string) (txapi.CapturePaymentResponseObject, error) {
	return t.p.ReplayCapturePayment(ctx, captureToAPI(req), reference)
}

func (t txPayments) RefundPayment(ctx context.Context, tx pgx.Tx, req txapi.RefundPaymentRequestObject) (txapi.RefundPaymentResponseObject, error) {
	return t.p.RefundPayment(ctx, tx, refundToAPI(req))
}

func (t txPayments) ReplayRefundPayment(ctx context.Context, req txapi.RefundPaymentRequestObject, status int) (txapi.RefundPaymentResponseObject, error) {
	return t.p.ReplayRefundPayment(ctx, refundToAPI(req), status)
}

func (t txPayments) CreatePayout(ctx context.Context, tx pgx.Tx, req txapi.CreatePayoutRequestObject) (txapi.CreatePayoutResponseObject, error) {
	return t.p.CreatePayout(ctx, tx, api.CreatePayoutRequestObject{Params: api.CreatePayoutParams(req.Params), Body: (*api.CreatePayoutJSONRequestBody)(req.Body)})
}

func (t txPayments) GetPayout(ctx context.Context, req txapi.GetPayoutRequestObject) (txapi.GetPayoutResponseObject, error) {
	return t.p.GetPayout(ctx, api.GetPayoutRequestObject{PayoutId: req.PayoutId, Params: api.GetPayoutParams(req.Params)})
}
