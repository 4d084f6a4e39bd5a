package idem_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// benchEnv is a store on its own schema whose pool counts round trips.
func benchEnv(b *testing.B) (*idem.Store, *pgxpool.Pool, *queryCounter) {
	b.Helper()
	counter := &queryCounter{}
	sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 2, Tracer: counter})
	pool := sch.Pool
	if _, err := pool.Exec(context.Background(), "CREATE TABLE payments (key text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	s, err := idem.NewStore(pool, sch.Config())
	if err != nil {
		b.Fatal(err)
	}
	return s, pool, counter
}

func benchBusiness(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
	c, _ := idem.ClaimFromContext(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 100)", c.Key); err != nil {
		return nil, err
	}
	return &idem.Outcome{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":"pay_1","amount":100,"currency":"EUR","status":"captured"}`)}, nil
}

func reportTrips(b *testing.B, c *queryCounter, before int64) {
	b.ReportMetric(float64(c.n.Load()-before)/float64(b.N), "roundtrips/op")
}

// BenchmarkBaselineInsert is the business write alone: begin, insert, commit. The others are
// read as ratios of it.
func BenchmarkBaselineInsert(b *testing.B) {
	_, pool, counter := benchEnv(b)
	ctx := context.Background()
	i := 0
	before := counter.n.Load()
	for b.Loop() {
		i++
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 100)", fmt.Sprintf("base-%d", i)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportTrips(b, counter, before)
}

func benchServe(b *testing.B, mode idem.ClaimMode, replay bool) {
	s, _, counter := benchEnv(b)
	p := policy()
	p.Claim = mode
	ctx := context.Background()
	want := idemhttp.ResultExecuted
	if replay {
		want = idemhttp.ResultReplayed
		if _, err := idemhttp.Serve(ctx, s, p, request("replayed", "fp"), benchBusiness); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	before := counter.n.Load()
	for b.Loop() {
		key := "replayed"
		if !replay {
			i++
			key = fmt.Sprintf("k-%d", i)
		}
		r, err := idemhttp.Serve(ctx, s, p, request(key, "fp"), benchBusiness)
		if err != nil || r.Kind != want {
			b.Fatalf("Serve = %+v, %v", r, err)
		}
	}
	reportTrips(b, counter, before)
}

// BenchmarkClaimComplete is a first request in lease mode: claim, begin, business insert,
// complete, commit.
func BenchmarkClaimComplete(b *testing.B) { benchServe(b, idem.ClaimLease, false) }

// BenchmarkClaimCompleteTransactionMode is a first request with the claim inside the business
// transaction: begin, claim, business insert, complete, commit — one commit.
func BenchmarkClaimCompleteTransactionMode(b *testing.B) {
	benchServe(b, idem.ClaimTransaction, false)
}

// BenchmarkReplay is a retry of a completed request in lease mode: the claim returns the
// stored outcome.
func BenchmarkReplay(b *testing.B) { benchServe(b, idem.ClaimLease, true) }
