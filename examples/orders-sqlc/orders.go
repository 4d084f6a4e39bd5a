package main

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/orders-sqlc/api"
	"github.com/idemgen/idemgen/examples/orders-sqlc/db"
	"github.com/idemgen/idemgen/runtime/idem"
)

// schemaSQL is the business table, the file sqlc reads to type the queries.
//
//go:embed schema.sql
var schemaSQL string

// orders implements api.IdempotentServerInterface with sqlc's queries.
type orders struct {
	queries *db.Queries // on the pool: for reads outside an idempotent operation
}

// CreateOrder runs once per key. queries.WithTx(tx) binds sqlc's generated queries to the
// transaction idemgen hands the handler, so the order and the stored response commit together:
// a retry finds the response and no second order, and a rollback leaves neither. The handler
// never commits or rolls tx back itself.
func (o orders) CreateOrder(ctx context.Context, tx pgx.Tx, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	row, err := o.queries.WithTx(tx).CreateOrder(ctx, db.CreateOrderParams{Item: req.Body.Item, Quantity: req.Body.Quantity})
	if err != nil {
		return nil, err // rolls back and releases the key: a retry runs again
	}
	return api.CreateOrder201JSONResponse{Body: api.Order{Id: row.ID, Item: row.Item, Quantity: row.Quantity}}, nil
}

// setup creates the business table and the key table on pool, and returns the example's handler
// and its Store (whose background work the caller stops with Close).
func setup(ctx context.Context, pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger) (http.Handler, *idem.Store, error) {
	if _, err := pool.Exec(ctx, schemaSQL); err != nil {
		return nil, nil, fmt.Errorf("create the orders table: %w", err)
	}
	migrator, err := idem.NewMigrator(pool, cfg)
	if err != nil {
		return nil, nil, err
	}
	if _, err := migrator.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		return nil, nil, fmt.Errorf("migrate the key table: %w", err)
	}
	c := idem.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Logger = log
	store, err := idem.NewStore(pool, &c)
	if err != nil {
		return nil, nil, err
	}
	return api.NewIdempotentHandler(orders{queries: db.New(pool)}, store, nil), store, nil
}
