package bench

// The two servers that keep the key's durable history (x-idempotency history: true): the
// example's API generated once more with the history on every idempotent operation, in each
// claim mode (bench/internal/histapi, bench/internal/txhistapi). Each is wired exactly as the
// server it is compared with, lease-history as lease (the example's NewHandler, its Prometheus
// observer included) and transaction-history as transaction, so the difference between the two
// rows of a pair is what the history costs a request.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/bench/internal/histapi"
	"github.com/idemgen/idemgen/bench/internal/txhistapi"
	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemprom"
)

const (
	// serverLeaseHistory is the lease server with history: true on create.
	serverLeaseHistory = "lease-history"
	// serverTransactionHistory is the transaction server with history: true on create.
	serverTransactionHistory = "transaction-history"
)

// historyHandler builds serverLeaseHistory or serverTransactionHistory.
func historyHandler(mode string, pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger) (http.Handler, error) {
	c := *cfg
	c.Tenant = tenantForStore
	c.Logger = log
	if mode == serverLeaseHistory {
		// As the example's NewHandler, which serves lease: its metrics observe every request.
		metrics := idemprom.New(&idemprom.Options{Operations: []string{"createPayment", "capturePayment", "refundPayment", "createPayout", "createTransfer"}})
		c.Observer = metrics.Observer()
	}
	store, err := idem.NewStore(pool, &c)
	if err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	p, err := payments.NewAPI(pool, cfg.Schema, log)
	if err != nil {
		return nil, err
	}
	var h http.Handler
	if mode == serverLeaseHistory {
		h = histapi.NewIdempotentHandler(histPayments{p: p}, store, &histapi.IdempotentHandlerOptions{
			Middlewares: []histapi.StrictMiddlewareFunc{validateHist},
		})
	} else {
		h = txhistapi.NewIdempotentHandler(txHistPayments{p: p}, store, &txhistapi.IdempotentHandlerOptions{
			Middlewares: []txhistapi.StrictMiddlewareFunc{validateTxHist},
		})
	}
	return payments.OuterHandler(pool, log, h, nil), nil
}

// histPayments serves histapi's create through the example's handler (the benchmark sends
// nothing else; every other operation answers 501).
type histPayments struct {
	histapi.UnimplementedIdempotentServer
	p api.IdempotentServerInterface
}

func (h histPayments) CreatePayment(ctx context.Context, tx pgx.Tx, req histapi.CreatePaymentRequestObject) (histapi.CreatePaymentResponseObject, error) {
	return h.p.CreatePayment(ctx, tx, histToAPI(req))
}

// histToAPI is histapi's create request as package api's type (the same fields).
func histToAPI(req histapi.CreatePaymentRequestObject) api.CreatePaymentRequestObject {
	return api.CreatePaymentRequestObject{Params: api.CreatePaymentParams(req.Params), Body: (*api.CreatePaymentJSONRequestBody)(req.Body)}
}

// validateHist is payments.Validate for histapi's create request.
func validateHist(next histapi.StrictHandlerFunc, operationID string) histapi.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		pass := func(ctx context.Context, w http.ResponseWriter, r *http.Request, _ any) (any, error) {
			return next(ctx, w, r, request)
		}
		asAPI := request
		if req, ok := request.(histapi.CreatePaymentRequestObject); ok {
			asAPI = histToAPI(req)
		}
		return payments.Validate(pass, operationID)(ctx, w, r, asAPI)
	}
}

// txHistPayments is histPayments for txhistapi.
type txHistPayments struct {
	txhistapi.UnimplementedIdempotentServer
	p api.IdempotentServerInterface
}

func (h txHistPayments) CreatePayment(ctx context.Context, tx pgx.Tx, req txhistapi.CreatePaymentRequestObject) (txhistapi.CreatePaymentResponseObject, error) {
	return h.p.CreatePayment(ctx, tx, txHistToAPI(req))
}

// txHistToAPI is histToAPI for txhistapi.
func txHistToAPI(req txhistapi.CreatePaymentRequestObject) api.CreatePaymentRequestObject {
	return api.CreatePaymentRequestObject{Params: api.CreatePaymentParams(req.Params), Body: (*api.CreatePaymentJSONRequestBody)(req.Body)}
}

// validateTxHist is payments.Validate for txhistapi's create request.
func validateTxHist(next txhistapi.StrictHandlerFunc, operationID string) txhistapi.StrictHandlerFunc {
	return func(ctx context.Context, w http.ResponseWriter, r *http.Request, request any) (any, error) {
		pass := func(ctx context.Context, w http.ResponseWriter, r *http.Request, _ any) (any, error) {
			return next(ctx, w, r, request)
		}
		asAPI := request
		if req, ok := request.(txhistapi.CreatePaymentRequestObject); ok {
			asAPI = txHistToAPI(req)
		}
		return payments.Validate(pass, operationID)(ctx, w, r, asAPI)
	}
}
