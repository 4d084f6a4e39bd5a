package main

// BenchmarkFirstHandler: one first execution (a new key each time) served in process through a
// bench server's real HTTP handler on real PostgreSQL, so that its CPU and allocation profile is
// the server's own work per first execution (go test -bench FirstHandler -cpuprofile,
// -memprofile). make bench-http measures the same over loopback.

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

func BenchmarkFirstHandler(b *testing.B) {
	for _, mode := range []string{serverCeiling, serverPeer, serverLease, serverTransaction} {
		b.Run(mode, func(b *testing.B) { benchFirstHandler(b, mode) })
	}
}

func benchFirstHandler(b *testing.B, mode string) {
	ctx := context.Background()
	sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 2})
	if err := migrate(ctx, sch.Pool); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(sch.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	h, err := benchHandler(mode, pool, sch.Name, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	serve := func() *httptest.ResponseRecorder {
		n++
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(benchBodyBytes))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(tenantHeader, benchTenant)
		req.Header.Set("Idempotency-Key", "first-"+strconv.Itoa(n))
		// A served request's context can be cancelled (the client may leave), and pgx watches
		// such a context for every statement: so does this one.
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(rctx))
		return rec
	}
	if rec := serve(); rec.Code != http.StatusCreated {
		b.Fatalf("first execution: status %d, want 201: %s", rec.Code, rec.Body)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if rec := serve(); rec.Code != http.StatusCreated {
			b.Fatalf("first execution: status %d, want 201: %s", rec.Code, rec.Body)
		}
	}
}

// reportCPU starts counting this process's CPU time (user and system, every goroutine's: the
// handler's, pgx's, the runtime's) and returns the function that reports it per op as
// serverCPUµs/op, the in-process figure behind make bench-http's "server CPU µs/req".
func reportCPU(b *testing.B) func() {
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := used()
	return func() {
		b.ReportMetric(float64((used()-start).Microseconds())/float64(b.N), "serverCPUµs/op")
	}
}
