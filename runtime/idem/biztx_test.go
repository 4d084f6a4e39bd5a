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

// A lease-mode full claim begins the business transaction in its own batch, behind an owner
// guard. When the guard disagrees with the claim, the request still runs once, beginning on its
// own; when the batch fails after the claim committed, the key is given back, so a retry runs at
// once. (The fast path's insert carries its own guard and sends no owner guard: these stores
// claim the full way.)
func TestLeaseClaimAndBeginFallbacks(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runs := 0
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		runs++
		return &idem.Outcome{Status: 201, Body: []byte("done")}, nil
	}

	// Each key has an expired row, so the fast claim inserts nothing and the full claim (whose
	// batch has the owner guard) decides.
	expired := func(key string) {
		t.Helper()
		if _, err := sch.Pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{sch.Name, sch.Table}.Sanitize()+` (tenant, scope, key, operation, fingerprint, state,
			owner_token, lease_expires_at, expires_at) VALUES ('', 's', $1, '', 'fp', 'complete', gen_random_uuid(), now() - interval '1 hour', now() - interval '1 hour')`, key); err != nil {
			t.Fatal(err)
		}
	}
	expired("disagree")
	expired("fails")
	disagrees, _ := idem.NewStore(sch.Pool, sch.Config())
	// As if the claim were not this request's: the guard divides by zero.
	idem.SetOwnerGuard(disagrees, guardSQL("1 / (length($1::text) * 0)"))
	p := &idem.DoParams{Scope: "s", Key: "disagree", Fingerprint: "fp"}
	if r, err := disagrees.Do(ctx, p, fn); err != nil || r.Replayed || runs != 1 {
		t.Fatalf("guard disagreeing: %+v, %v, %d runs; want one execution", r, err, runs)
	}
	if r, err := disagrees.Do(ctx, p, fn); err != nil || !r.Replayed || runs != 1 {
		t.Fatalf("its replay: %+v, %v, %d runs; want the replay", r, err, runs)
	}

	fails, _ := idem.NewStore(sch.Pool, sch.Config())
	// Fails otherwise, after the claim committed.
	idem.SetOwnerGuard(fails, guardSQL("($1::text || ' is not a number')::int"))
	p = &idem.DoParams{Scope: "s", Key: "fails", Fingerprint: "fp"}
	if _, err := fails.Do(ctx, p, fn); err == nil || errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("a batch failing after its claim: %v; want a store error", err)
	}
	plain, _ := idem.NewStore(sch.Pool, sch.Config())
	if r, err := plain.Do(ctx, p, fn); err != nil || r.Replayed || runs != 2 {
		t.Fatalf("the retry: %+v, %v, %d runs; want it to run at once (the failed claim released its key)", r, err, runs)
	}
	deadline := time.Now().Add(5 * time.Second)
	for sch.Pool.Stat().AcquiredConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still acquired; want 0", sch.Pool.Stat().AcquiredConns())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// guardSQL is an owner guard that evaluates expr when it runs (not when it is prepared), with
// the guard's four parameters.
func guardSQL(expr string) string {
	return "SELECT " + expr + " WHERE $2::text IS NOT NULL AND $3::text IS NOT NULL AND $4::uuid IS NOT NULL"
}

// A connection whose prepared statements the application deallocated still serves every
// request alike: the Store's mark that it prepared them is stale then, and pgx prepares what a
// batch lacks. Both claim modes, a first execution and a replay each, on one connection.
func TestDeallocatedStatementsStillServe(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 1})
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs := 0
	do := func(mode idem.ClaimMode, key string) *idem.DoResult {
		t.Helper()
		r, err := store.Do(ctx, &idem.DoParams{Scope: "s", Key: key, Operation: "op", Fingerprint: "fp", Claim: mode},
			func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				runs++
				return &idem.Outcome{Status: 201, Body: []byte(key)}, nil
			})
		if err != nil {
			t.Fatalf("%s %s: %v", mode, key, err)
		}
		return r
	}
	deallocate := func() {
		t.Helper()
		conn, err := sch.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if err := conn.Conn().DeallocateAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		do(mode, "warm-"+mode.String()) // prepares and marks the pool's one connection
		for _, key := range []string{"after-" + mode.String()} {
			deallocate()
			if r := do(mode, key); r.Replayed || string(r.Outcome.Body) != key {
				t.Fatalf("%s first execution after DeallocateAll: replayed %v, body %q", mode, r.Replayed, r.Outcome.Body)
			}
			deallocate()
			if r := do(mode, key); !r.Replayed || string(r.Outcome.Body) != key {
				t.Fatalf("%s replay after DeallocateAll: replayed %v, body %q; want a replay of %q", mode, r.Replayed, r.Outcome.Body, key)
			}
		}
	}
	if runs != 4 {
		t.Fatalf("the handler ran %d times; want 4 (one per first execution)", runs)
	}
}
