package payments

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed schema.sql
var schemaSQL string

// schemaLockID serialises concurrent starts: CREATE TABLE IF NOT EXISTS is not safe against a
// second session creating the same table at the same moment.
const schemaLockID = 0x1de_9e1_0001

// Migrate creates the example's tables (payments, refunds, payment_events) in the pool's
// search_path schema.
// idemgen's key table is migrated separately by idem.Migrate.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockID)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schemaSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("create the payments tables: %w", err)
	}
	return nil
}
