//go:build citus

package idem_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestCitusGuarantees runs the guarantee table (guarantee_test.go) on a real Citus cluster:
// every guarantee, through a pool and through a single connection, in each claim mode, with the
// key table, its history and the business table distributed by tenant and co-located, as
// docs/citus.md says; and once more through a pool whose sessions force generic plans
// (plan_cache_mode = force_generic_plan, which a DBA may set), since Citus plans some statements
// differently then. make test runs the same table with Citus's statements on plain PostgreSQL;
// this is where the cluster itself answers them.
func TestCitusGuarantees(t *testing.T) {
	url := citusURL(t)
	var paths []guaranteePath
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		paths = append(paths,
			guaranteePath{"citus", "pool", mode, citusPath(url, false, false)},
			guaranteePath{"citus", "single", mode, citusPath(url, true, false)},
			guaranteePath{"citus(generic plans)", "pool", mode, citusPath(url, false, true)},
		)
	}
	runGuaranteeTable(t, withDefer(withAhead(paths)))
}

// citusPath sets a row up on the coordinator at url: a schema of its own, migrated, with the key
// table, its history and payments distributed by tenant; single hides the pool from the Store;
// generic makes its sessions force generic plans.
func citusPath(url string, single, generic bool) func(t *testing.T, g *guaranteeEnv) {
	return func(t *testing.T, g *guaranteeEnv) {
		e := newCitusEnv(t, url, true, func(pc *pgxpool.Config) {
			if generic {
				pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
			}
			pc.ConnConfig.DialFunc = g.cut.dial
			pc.MaxConns = 8
		})
		schema, pool, cfg, table := e.schema, e.pool, *e.cfg, e.cfg.Table
		g.sch = &idemtest.Schema{Name: schema, Pool: pool, URL: url, Table: table}
		g.db = pool
		if single {
			g.db = hidden{pool}
		}
		g.cfg = cfg
		g.cfg.Topology = idem.TopologyCitus
		// On a small shared machine a storm's queue on 8 connections outlasts the default 5s:
		// every statement is a round trip to a worker as well.
		g.cfg.StoreTimeout = 60 * time.Second
		// The listener has a connection of its own to the coordinator, where notifications are sent.
		g.cfg.ListenConn = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
		g.cfg.Logger = slog.New(slog.DiscardHandler)
	}
}
