package idem_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// benchEnv is a store on its own schema whose pool counts round trips.
func benchEnv(b *testing.B) (*idem.Store, *pgxpool.Pool, *queryCounter) {
	s, sch, counter := benchSchema(b)
	return s, sch.Pool, counter
}

func benchSchema(b *testing.B) (*idem.Store, *idemtest.Schema, *queryCounter) {
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
	return s, sch, counter
}

// walMeter reports the WAL a benchmark wrote per op (the server's whole WAL: run it on a server
// nothing else writes to) and the share of the key table's updates that were HOT, which say what
// a change to the key row or its statements costs the database.
type walMeter struct {
	pool  *pgxpool.Pool
	table string
	lsn   string
	cpu   map[string]int64
}

// serverCPU is the CPU time (clock ticks, from /proc) of every process of the server's that
// pg_stat_activity lists (its connections and background processes), by pid; nil where /proc
// is not there to read.
func serverCPU(b *testing.B, pool *pgxpool.Pool) map[string]int64 {
	rows, err := pool.Query(context.Background(), "SELECT pid::text FROM pg_stat_activity")
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, pid := range pids {
		raw, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		// Fields 14 and 15 (utime, stime) count from the one after the command's closing paren.
		_, rest, ok := strings.Cut(string(raw), ") ")
		f := strings.Fields(rest)
		if !ok || len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = u + st
	}
	return out
}

func startWAL(b *testing.B, sch *idemtest.Schema) *walMeter {
	m := &walMeter{pool: sch.Pool, table: sch.Table, cpu: serverCPU(b, sch.Pool)}
	if err := m.pool.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&m.lsn); err != nil {
		b.Fatal(err)
	}
	return m
}

func (m *walMeter) report(b *testing.B) {
	ctx := context.Background()
	var wal float64
	if err := m.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - $1::pg_lsn", m.lsn).Scan(&wal); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(wal/float64(b.N), "walB/op")
	var ticks int64
	for pid, t := range serverCPU(b, m.pool) {
		ticks += t - m.cpu[pid] // a process that started since counts whole
	}
	if len(m.cpu) > 0 { // ticks of 10 ms (the usual USER_HZ of 100)
		b.ReportMetric(float64(ticks)*1e4/float64(b.N), "pgCPUµs/op")
	}
	// The statistics reach the view only when each backend flushes them (about once a second
	// when idle): good enough for a benchmark's report, never for a test's assertion.
	time.Sleep(1500 * time.Millisecond)
	var upd, hot float64
	if err := m.pool.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0)
		FROM pg_stat_user_tables WHERE relid = to_regclass(current_schema() || '.' || quote_ident($1))`, m.table).Scan(&upd, &hot); err != nil {
		b.Fatal(err)
	}
	if upd > 0 {
		b.ReportMetric(100*hot/upd, "hot%")
	}
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
	benchServeHistory(b, mode, replay, false)
}

// benchServeHistory is benchServe for an operation that keeps the key's history (or not).
func benchServeHistory(b *testing.B, mode idem.ClaimMode, replay, history bool) {
	s, sch, counter := benchSchema(b)
	p := policy()
	p.Claim = mode
	p.History = history
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
	wal := startWAL(b, sch)
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
	wal.report(b)
}

// BenchmarkClaimComplete is a first request in lease mode: claim, begin, business insert,
// complete, commit.
func BenchmarkClaimComplete(b *testing.B) { benchServe(b, idem.ClaimLease, false) }

// BenchmarkClaimCompleteTransactionMode is a first request with the claim inside the business
// transaction: begin, claim, business insert, complete, commit — one commit.
func BenchmarkClaimCompleteTransactionMode(b *testing.B) {
	benchServe(b, idem.ClaimTransaction, false)
}

// BenchmarkClaimCompleteHistory is BenchmarkClaimComplete for an operation that keeps the
// key's history (x-idempotency history: true): its claim and completion also append a row.
func BenchmarkClaimCompleteHistory(b *testing.B) { benchServeHistory(b, idem.ClaimLease, false, true) }

// BenchmarkClaimCompleteTransactionModeHistory is BenchmarkClaimCompleteTransactionMode with
// the key's history.
func BenchmarkClaimCompleteTransactionModeHistory(b *testing.B) {
	benchServeHistory(b, idem.ClaimTransaction, false, true)
}

// BenchmarkReplayHistory is BenchmarkReplay with the key's history: replays are counted in
// memory and flushed every few seconds.
func BenchmarkReplayHistory(b *testing.B) { benchServeHistory(b, idem.ClaimLease, true, true) }

// BenchmarkReplay is a retry of a completed request in lease mode: the claim returns the
// stored outcome.
func BenchmarkReplay(b *testing.B) { benchServe(b, idem.ClaimLease, true) }

// BenchmarkReplayTransactionMode is a retry of a completed request in transaction mode: the
// lock statement answers with the stored outcome, and nothing begins.
func BenchmarkReplayTransactionMode(b *testing.B) { benchServe(b, idem.ClaimTransaction, true) }
