package idem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// plainDB is a DB that is not a pool (a tracing wrapper, say): the Store cannot hold the
// business transaction's connection itself and ends it the plain way.
type plainDB struct{ p *pgxpool.Pool }

func (d plainDB) Begin(ctx context.Context) (pgx.Tx, error) { return d.p.Begin(ctx) }
func (d plainDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.p.Exec(ctx, sql, args...)
}
func (d plainDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.p.Query(ctx, sql, args...)
}
func (d plainDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.p.QueryRow(ctx, sql, args...)
}

// A lease lost at completion rolls the work back and gives the connection back, whether the
// Store holds the connection (a pool) or not: no request may leave one idle in a transaction.
func TestLostLeaseAtCompletionLeavesNoConnectionBehind(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	// A pool of its own, so that a leak fails this test fast instead of hanging its cleanup: the
	// server ends a session left idle in a transaction after 2s (releasing its locks for the
	// schema's drop), and a pool that may still count leaked connections is not closed (Close
	// would wait for them forever).
	cfg, err := pgxpool.ParseConfig(sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
	cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = "2000"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			pool.Close()
		}
	})
	store := sch.Config()
	store.StoreTimeout = time.Second // an exhausted pool answers within it
	for _, db := range []struct {
		name string
		db   idem.DB
	}{{"pool", pool}, {"plain DB", plainDB{pool}}} {
		s, err := idem.NewStore(db.db, store)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 { // more than MaxConns: a leak would exhaust the pool
			key := db.name + string(rune('a'+i))
			_, err := s.Do(context.Background(), &idem.DoParams{Scope: "s", Key: key, Fingerprint: "fp"},
				func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					// Another request takes the key over while this one runs.
					_, err := sch.Pool.Exec(ctx, "UPDATE "+s.Table()+" SET owner_token = gen_random_uuid() WHERE key = $1", key)
					return &idem.Outcome{Status: 201}, err
				})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("%s, try %d: Do = %v; want ErrLeaseLost", db.name, i, err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for pool.Stat().AcquiredConns() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d connections still acquired 5s after the lost leases; want 0", db.name, pool.Stat().AcquiredConns())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
