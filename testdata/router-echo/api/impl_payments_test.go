package api_test

// The payments operations on routertest.Backend, the same in every router's golden package.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-echo/api"
)

func payment(p routertest.Payment) api.Payment {
	return api.Payment{PaymentId: p.ID, Amount: p.Amount, Currency: p.Currency}
}

func (s server) CreatePayment(ctx context.Context, tx pgx.Tx, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	p, err := s.b.CreatePayment(ctx, tx, req.Body.Amount, req.Body.Currency)
	if err != nil {
		return nil, err
	}
	signature, interaction := s.b.Sign(p)
	return api.CreatePayment201JSONResponse{Body: payment(p), Headers: api.CreatePayment201ResponseHeaders{
		XJwsSignature: signature, XFapiInteractionId: interaction,
	}}, nil
}

func (s server) UpdatePayment(ctx context.Context, tx pgx.Tx, req api.UpdatePaymentRequestObject) (api.UpdatePaymentResponseObject, error) {
	p, err := s.b.UpdatePayment(ctx, tx, req.PaymentId, req.Body.Amount)
	if err != nil || p == nil {
		return nil, err
	}
	return api.UpdatePayment200JSONResponse(payment(*p)), nil
}

func (s server) CreateRefund(ctx context.Context, tx pgx.Tx, req api.CreateRefundRequestObject) (api.CreateRefundResponseObject, error) {
	body := req.JSONBody
	if body == nil {
		body = req.ApplicationJSONCharsetUTF8Body
	}
	amount, err := s.b.Refund(ctx, tx, req.PaymentId, body.Amount)
	if err != nil {
		return nil, err
	}
	return api.CreateRefund201JSONResponse{Amount: amount}, nil
}
