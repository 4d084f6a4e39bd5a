package bench

// BenchmarkFirstHandler and BenchmarkReplayHandler: one first execution (a new key each time),
// or one replay, served in process through a bench server's real HTTP handler on real
// PostgreSQL, without sockets between client and server, so that its CPU and allocation profile
// is the server's own work per request (go test -bench 'FirstHandler|ReplayHandler'
// -cpuprofile, -memprofile). make bench-http measures the same over loopback.

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

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func BenchmarkFirstHandler(b *testing.B) {
	for _, mode := range []string{serverCeiling, serverPeer, serverPeerRow, serverPeerRowGuarded, serverPeerLease, serverPeerLeaseRow, serverHandwritten, serverLease, serverTransaction, serverLeaseHistory, serverTransactionHistory} {
		b.Run(mode, func(b *testing.B) {
			serve := inProcess(b, mode)
			n := 0
			first := func() {
				n++
				if rec := serve("first-" + strconv.Itoa(n)); rec.Code != http.StatusCreated {
					b.Fatalf("first execution: status %d, want 201: %s", rec.Code, rec.Body)
				}
			}
			first()
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				first()
			}
		})
	}
}

func BenchmarkReplayHandler(b *testing.B) {
	for _, mode := range []string{serverPeer, serverPeerRow, serverPeerRowGuarded, serverPeerLease, serverPeerLeaseRow, serverHandwritten, serverLease, serverTransaction, serverLeaseHistory, serverTransactionHistory} {
		b.Run(mode, func(b *testing.B) {
			serve := inProcess(b, mode)
			if rec := serve("replayed"); rec.Code != http.StatusCreated {
				b.Fatalf("first execution: status %d, want 201: %s", rec.Code, rec.Body)
			}
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if rec := serve("replayed"); rec.Code != http.StatusCreated || rec.Header().Get(idemhttp.HeaderReplayed) != "true" {
					b.Fatalf("replay: status %d, replayed %q; want 201, replayed", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed))
				}
			}
		})
	}
}

// inProcess builds bench server mode's HTTP stack on a schema and pool of its own and returns
// the function that serves it one create with the given key.
func inProcess(b *testing.B, mode string) func(key string) *httptest.ResponseRecorder {
	ctx := context.Background()
	sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 2})
	if err := payments.Migrate(ctx, sch.Pool); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(sch.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
	// Four connections, the smallest pool on which the Store keeps a replay's connection for the
	// ROLLBACK it owes (runtime/idem/owed.go) as it does on a production pool, rather than
	// rolling back in a round trip of its own.
	cfg.MaxConns = 4
	trace := newStatementTrace(b) // make bench-statements
	if trace != nil {
		cfg.ConnConfig.Tracer = trace
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	h, err := benchHandler(mode, pool, sch.Name, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if trace != nil {
		// Setting the server up ran statements on these connections that the trace cannot pair
		// with the backend's dumps (a migration is one query of several commands, each with a
		// dump of its own): requests get fresh connections, whose dumps are theirs alone.
		pool.Reset()
	}
	return func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", bytes.NewReader(benchBodyBytes))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(tenantHeader, benchTenant)
		req.Header.Set("Idempotency-Key", key)
		// A served request's context can be cancelled (the client may leave), and pgx watches
		// such a context for every statement: so does this one.
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rec := httptest.NewRecorder()
		if trace != nil {
			trace.req.Add(1)
		}
		h.ServeHTTP(rec, req.WithContext(rctx))
		return rec
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
