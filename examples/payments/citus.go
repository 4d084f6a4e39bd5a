package payments

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// exampleTables are the tables docs/citus.md distributes by tenant for this service: its business
// tables (schema.sql, payouts.sql) and idemgen's key table with its history (keyTable). The fake
// bank's table (bank.sql), the bank's settlement webhooks (noTenant) and River's stay local.
func exampleTables(keyTable string) []string {
	var tables []string
	for _, src := range []string{schemaSQL, payoutsSQL} {
		for _, m := range createTable.FindAllStringSubmatch(src, -1) {
			if !noTenant[m[1]] {
				tables = append(tables, m[1])
			}
		}
	}
	return append(tables, keyTable, idem.HistoryTableName(keyTable))
}

var createTable = regexp.MustCompile(`(?m)^CREATE TABLE IF NOT EXISTS (\w+) \(`)

// noTenant are the example's tables that name no tenant, so Citus cannot distribute them with the
// rest: the bank's settlement webhooks, whose delivery keys are scoped by the operation alone.
var noTenant = map[string]bool{"bank_settlements": true}

// localOnCitus lists the example's tables (exampleTables) in schema that are not distributed by
// hash, when the database has the Citus extension; nil on plain PostgreSQL.
func localOnCitus(ctx context.Context, pool *pgxpool.Pool, schema, keyTable string) ([]string, error) {
	var citus bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')").Scan(&citus); err != nil || !citus {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT t FROM unnest($1::text[]) WITH ORDINALITY AS u(t, i)
		WHERE NOT EXISTS (SELECT FROM pg_dist_partition
			WHERE logicalrelid = to_regclass(quote_ident($2) || '.' || quote_ident(t)) AND partmethod = 'h')
		ORDER BY i`, exampleTables(keyTable), schema)
	if err != nil {
		return nil, err
	}
	var local []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		local = append(local, t)
	}
	return local, rows.Err()
}

// warnLocalOnCitus logs a warning when the service runs on a Citus coordinator with its tables
// left local: everything then works, on the coordinator alone, which is not what Citus is for.
// It says so once, at start; a failure to ask is only logged.
func warnLocalOnCitus(ctx context.Context, pool *pgxpool.Pool, schema, keyTable string, log *slog.Logger) {
	local, err := localOnCitus(ctx, pool, schema, keyTable)
	switch {
	case err != nil:
		log.Warn("could not check whether the tables are distributed on Citus", "err", err)
	case len(local) > 0:
		log.Warn(fmt.Sprintf("the database is a Citus coordinator, and %d of the service's tables are not distributed: "+
			"every request runs on the coordinator alone; distribute them by tenant as docs/citus.md says (\"Distribution\")", len(local)),
			"schema", schema, "local_tables", local)
	}
}
