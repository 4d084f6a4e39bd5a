package api_test

// The orders API on routertest.Backend: the same in every router's golden package (the
// generated types have the same names in each), so that only router_test.go, the framework's
// wiring, differs.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"idemgen.test/golden/internal/routertest"
	"idemgen.test/golden/router-echo5/api"
)

type server struct{ b *routertest.Backend }

var region = "eu"

var _ api.IdempotentServerInterface = server{}

func order(o routertest.Order) api.Order {
	return api.Order{OrderId: o.ID, Item: o.Item, Quantity: o.Quantity, Status: o.Status}
}

func (s server) CreateOrder(ctx context.Context, tx pgx.Tx, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	o, err := s.b.CreateOrder(ctx, tx, req.Body.Item, req.Body.Quantity)
	if err != nil {
		return nil, err
	}
	return api.CreateOrder201JSONResponse{Body: order(o), Headers: api.CreateOrder201ResponseHeaders{XOrderRegion: &region}}, nil
}

func (s server) GetOrder(ctx context.Context, req api.GetOrderRequestObject) (api.GetOrderResponseObject, error) {
	o, err := s.b.GetOrder(ctx, req.OrderId)
	if err != nil || o == nil {
		return api.GetOrder404Response{}, err
	}
	return api.GetOrder200JSONResponse(order(*o)), nil
}

func (s server) ShipOrder(ctx context.Context, tx pgx.Tx, req api.ShipOrderRequestObject) (api.ShipOrderResponseObject, string, error) {
	o, err := s.b.ShipOrder(ctx, tx, req.OrderId)
	if err != nil {
		return nil, "", err
	}
	if o == nil {
		return api.ShipOrder404Response{}, "", nil
	}
	return api.ShipOrder200JSONResponse(order(*o)), o.ID, nil
}

func (s server) ReplayShipOrder(ctx context.Context, req api.ShipOrderRequestObject, reference string) (api.ShipOrderResponseObject, error) {
	o, err := s.b.GetOrder(ctx, reference)
	if err != nil || o == nil {
		return api.ShipOrder404Response{}, err
	}
	return api.ShipOrder200JSONResponse(order(*o)), nil
}

func (s server) AddNote(ctx context.Context, tx pgx.Tx, req api.AddNoteRequestObject) (api.AddNoteResponseObject, error) {
	if err := s.b.AddNote(ctx, tx, req.OrderId, req.Body.Text); err != nil {
		return nil, err
	}
	return api.AddNote202JSONResponse{OrderId: req.OrderId, Text: req.Body.Text}, nil
}

func (s server) ReplayAddNote(_ context.Context, req api.AddNoteRequestObject, _ int) (api.AddNoteResponseObject, error) {
	return api.AddNote202JSONResponse{OrderId: req.OrderId, Text: req.Body.Text}, nil
}
