package main

// BenchmarkReplayHandler: one replay served in process through a bench server's real HTTP
// handler on real PostgreSQL, without sockets between client and server, so that its CPU and
// allocation profile is the server's own work per replay (go test -bench ReplayHandler
// -cpuprofile, -memprofile). make bench-http measures the same over loopback.

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func BenchmarkReplayHandler(b *testing.B) {
	for _, mode := range []string{serverPeer, serverLease, serverTransaction} {
		b.Run(mode, func(b *testing.B) { benchReplayHandler(b, mode) })
	}
}

func benchReplayHandler(b *testing.B, mode string) {
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
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(benchBodyBytes))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(tenantHeader, benchTenant)
		req.Header.Set("Idempotency-Key", "replayed")
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
		if rec := serve(); rec.Code != http.StatusCreated || rec.Header().Get(idemhttp.HeaderReplayed) != "true" {
			b.Fatalf("replay: status %d, replayed %q; want 201, replayed", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed))
		}
	}
}
