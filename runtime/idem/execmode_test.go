package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The runtime's batches (guards that fail on purpose, statements prepared by name) work whatever
// query exec mode the application's pool uses: first executions run, replays replay; and in the
// modes that prepare nothing by name, the Store prepares nothing either.
func TestEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		sch := idemtest.TestSchema(t, nil)
		cfg, _ := pgxpool.ParseConfig(sch.URL)
		cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
		cfg.ConnConfig.DefaultQueryExecMode = mode
		cfg.MaxConns = 1 // so that the check below sees the connection the requests used
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, _ := idem.NewStore(pool, sch.Config())
		for _, cm := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			p := &idem.DoParams{Scope: "s", Key: "k" + cm.String(), Fingerprint: "fp", Claim: cm}
			for i := 0; i < 3; i++ {
				r, err := s.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					return &idem.Outcome{Status: 201, Body: []byte("x")}, nil
				})
				if err != nil {
					t.Errorf("mode %v claim %v try %d: %v", mode, cm, i, err)
					continue
				}
				if (i > 0) != r.Replayed {
					t.Errorf("mode %v claim %v try %d: replayed %v", mode, cm, i, r.Replayed)
				}
			}
		}
		// A pool that prepares nothing by name (for a pooler that does not keep prepared
		// statements, say) gets nothing prepared by the Store either.
		if mode == pgx.QueryExecModeSimpleProtocol || mode == pgx.QueryExecModeExec {
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("mode %v: %d statements prepared on the connection; want none", mode, n)
			}
		}
	}
}
