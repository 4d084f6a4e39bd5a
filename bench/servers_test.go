package bench

// The servers BenchmarkHTTP (http_test.go) compares. Each runs in a child process of the
// test binary (TestMain below), so its CPU and allocation profiles are the server's alone, not
// mixed with the load generator's, and a client's garbage never pauses a server.

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// tenantHeader is the example's stand-in for authentication: OuterHandler refuses a request
// without it and puts it in the context, where payments.TenantFrom reads it.
const tenantHeader = "X-Tenant-ID"

// tenantForStore is idem.Config.Tenant for the servers wired here: keys are scoped by tenant,
// as in the example.
func tenantForStore(ctx context.Context) (string, error) {
	t, ok := payments.TenantFrom(ctx)
	if !ok {
		return "", errors.New("bench: no tenant in the request context (is payments.OuterHandler installed?)")
	}
	return t, nil
}

// problemResponse answers create with a problem, as the example's own handlers do.
type problemResponse struct{ *idemhttp.Problem }

func (p problemResponse) VisitCreatePaymentResponse(w http.ResponseWriter) error {
	return p.WriteTo(w)
}

// The servers, by what stands between the HTTP stack and the business work.
const (
	// serverCeiling is the example with create's idempotency switched off: the same HTTP stack,
	// validation, business SQL in one transaction and schema, no key claimed or stored.
	serverCeiling = "ceiling"
	// serverLease is the example as it is (package api, claim: lease).
	serverLease = "lease"
	// serverTransaction is the example generated with claim: transaction (package txapi).
	serverTransaction = "transaction"
	// serverCached is the example with the runtime's replay cache on (64 MiB).
	serverCached = "cached"
	// serverPeer is the ceiling with create made idempotent by hand (peer_test.go): the
	// figure to beat.
	serverPeer = "peer"
	// serverPeerLease is the ceiling with create made idempotent by hand with a lease
	// (peer_lease_test.go): the claim committed before the work, takeover and fencing.
	// Lease mode's rows are compared with it too.
	serverPeerLease = "peer-lease"
	// serverPeerRow is the hand-written peer storing the runtime's key row instead of its own
	// narrow one (peer_test.go): the difference from the peer is what that row costs.
	serverPeerRow = "peer-row"
	// serverPeerRowGuarded is the row peer with the runtime's guarantees beyond the row written
	// by hand (peer_test.go): the design's fingerprint, a bounded claim, the handler's
	// timeout. The difference from the row peer is what those cost anyone; the difference to
	// claim: transaction, what the runtime's own code costs. make bench-http measures its first
	// executions; make bench-compare and make bench-instructions count both kinds of request.
	serverPeerRowGuarded = "peer-row-guarded"
	// serverPeerLeaseRow is the hand-written lease peer on the runtime's key row
	// (peer_lease_test.go): the difference from the lease peer is what that row costs a
	// lease.
	serverPeerLeaseRow = "peer-lease-row"
	// serverHandwritten is createPayment made idempotent by hand with net/http and pgx alone
	// (handwritten_test.go): no router, no validation, no strict server; an advisory lock, one
	// key row with the outcome, statements pipelined. The ceiling for claim: transaction.
	serverHandwritten = "handwritten"
)

// The child's environment. A test binary started with envServe set serves instead of testing.
const (
	envServe       = "IDEMGEN_BENCH_HTTP_SERVE"  // which server (benchServers)
	envServeURL    = "IDEMGEN_BENCH_HTTP_URL"    // PostgreSQL URL
	envServeSchema = "IDEMGEN_BENCH_HTTP_SCHEMA" // the schema its tables are in
	envServeConns  = "IDEMGEN_BENCH_HTTP_CONNS"  // pool size
)

// childLifetime bounds a child that its parent forgot: it stops by itself after this long.
const childLifetime = 15 * time.Minute

// tripCounter counts database round trips: every query, and every batch as one (pgx sends a
// batch in one pipelined exchange). Begin and commit are queries to pgx, so they count.
type tripCounter struct{ n atomic.Int64 }

var (
	_ pgx.QueryTracer = (*tripCounter)(nil)
	_ pgx.BatchTracer = (*tripCounter)(nil)
)

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// benchHandler builds the HTTP stack of one server on pool, whose search_path is schema.
func benchHandler(mode string, pool *pgxpool.Pool, schema string, log *slog.Logger) (http.Handler, error) {
	cfg := &idem.Config{Schema: schema}
	switch mode {
	case serverLease:
		return payments.NewHandler(pool, cfg, log)
	case serverCeiling:
		return ceilingHandler(pool, schema, log)
	case serverPeer:
		return peerHandler(pool, schema, log, false, false)
	case serverPeerRow:
		return peerHandler(pool, schema, log, true, false)
	case serverPeerRowGuarded:
		return peerHandler(pool, schema, log, true, true)
	case serverPeerLease:
		return peerLeaseHandler(pool, schema, log, false)
	case serverPeerLeaseRow:
		return peerLeaseHandler(pool, schema, log, true)
	case serverHandwritten:
		return handwrittenHandler(pool, schema)
	case serverTransaction:
		return transactionHandler(pool, cfg, log)
	case serverCached:
		cfg.ReplayCacheBytes = 64 << 20
		return payments.NewHandler(pool, cfg, log)
	case serverLeaseHistory, serverTransactionHistory:
		return historyHandler(mode, pool, cfg, log)
	}
	return nil, fmt.Errorf("unknown bench server %q (want one of %s)", mode, strings.Join(benchServers, ", "))
}

// ceilingHandler is payments.NewHandler with create served by ceilingServer.
func ceilingHandler(pool *pgxpool.Pool, schema string, log *slog.Logger) (http.Handler, error) {
	return stackFor(pool, schema, log, func(inner api.StrictServerInterface) api.StrictServerInterface {
		return ceilingServer{StrictServerInterface: inner, db: pool}
	})
}

// stackFor is payments.NewHandler's HTTP stack with create served by the strict server wrap returns; the
// other operations stay the example's idempotent ones (inner), which the benchmark does not use.
// The ceiling and the hand-written peer share it, so they differ only in create.
func stackFor(pool *pgxpool.Pool, schema string, log *slog.Logger, wrap func(inner api.StrictServerInterface) api.StrictServerInterface) (http.Handler, error) {
	store, err := idem.NewStore(pool, &idem.Config{Schema: schema, Tenant: tenantForStore, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	p, err := payments.NewAPI(pool, schema, log)
	if err != nil {
		return nil, err
	}
	// The answers NewIdempotentHandler installs for a request the strict server cannot bind and
	// for a handler's Go error: the runtime's problems.
	strict := api.NewStrictHandlerWithOptions(wrap(api.NewIdempotentServer(p, store)),
		[]api.StrictMiddlewareFunc{payments.Validate},
		api.StrictHTTPServerOptions{
			RequestErrorHandlerFunc:  idemhttp.RequestErrorHandler,
			ResponseErrorHandlerFunc: idemhttp.ResponseErrorHandler(store),
		})
	// The same stack as NewIdempotentHandler's: the body captured and capped, problems for
	// unrouted requests.
	apiMux := http.NewServeMux()
	api.HandlerWithOptions(strict, api.StdHTTPServerOptions{
		BaseRouter:       apiMux,
		ErrorHandlerFunc: api.IdempotencyParamErrorHandler,
	})
	return payments.OuterHandler(pool, log, idemhttp.Capture(0)(idemhttp.Routed(apiMux, apiMux)), nil), nil
}

// ceilingServer is the example's strict server with create's idempotency switched off: it runs
// createPayment, the business work, in a plain transaction. The payment is named after the
// Idempotency-Key header, read as a request id only (so every server gets the same bytes), and
// never claimed or stored. The other operations stay idempotent; the benchmark does not use them.
type ceilingServer struct {
	api.StrictServerInterface
	db *pgxpool.Pool
}

func (s ceilingServer) CreatePayment(ctx context.Context, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	tenant, ok := payments.TenantFrom(ctx)
	if !ok {
		return nil, errors.New("payments ceiling: no tenant in the request context (is requireTenant installed?)")
	}
	if req.Params.IdempotencyKey == nil || *req.Params.IdempotencyKey == "" {
		return problemResponse{idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid,
			"the ceiling server names the payment after the Idempotency-Key header: send one")}, nil
	}
	var resp api.CreatePaymentResponseObject
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		resp, err = payments.CreatePaymentTx(ctx, tx, tenant, *req.Params.IdempotencyKey, req.Body)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// transactionHandler is payments.NewHandler in claim: transaction (the example's package txapi),
// without the example's metrics, as the other servers.
func transactionHandler(pool *pgxpool.Pool, cfg *idem.Config, log *slog.Logger) (http.Handler, error) {
	c := *cfg
	c.Tenant = tenantForStore
	c.Logger = log
	store, err := idem.NewStore(pool, &c)
	if err != nil {
		return nil, fmt.Errorf("idempotency store: %w", err)
	}
	p, err := payments.NewAPI(pool, cfg.Schema, log)
	if err != nil {
		return nil, err
	}
	return payments.OuterHandler(pool, log, payments.NewIdempotentAPI(idem.ClaimTransaction, p, store), nil), nil
}

// serveChild is a child process: it serves one server on a loopback port and a control port
// (GET /stats: the round trips and the process's CPU time so far; /debug/pprof/), says where on
// its first line of stdout,
// and stops when its stdin closes (the parent ended or closed it) or after childLifetime.
func serveChild(mode string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "bench server %s: "+format+"\n", append([]any{mode}, args...)...)
		return 1
	}
	url, schema := os.Getenv(envServeURL), os.Getenv(envServeSchema)
	if url == "" || schema == "" {
		return fail("%s and %s must be set (BenchmarkHTTP starts this process)", envServeURL, envServeSchema)
	}
	conns, err := strconv.Atoi(os.Getenv(envServeConns))
	if err != nil || conns < 1 {
		return fail("%s=%q: want a pool size of at least 1", envServeConns, os.Getenv(envServeConns))
	}
	ctx, cancel := context.WithTimeout(context.Background(), childLifetime)
	defer cancel()

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return fail("parse %s: %v", envServeURL, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	// The database profile finds this server's connections in pg_stat_activity by this name.
	cfg.ConnConfig.RuntimeParams["application_name"] = benchAppName(mode)
	cfg.MaxConns = int32(conns)
	trips := &tripCounter{}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail("pool: %v", err)
	}
	defer pool.Close()
	// The access log and the store's events would cost every server the same; discarding them
	// (without formatting) leaves the idempotency layer's own cost to compare.
	h, err := benchHandler(mode, pool, schema, slog.New(slog.DiscardHandler))
	if err != nil {
		return fail("%v", err)
	}

	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listen: %v", err)
	}
	ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listen: %v", err)
	}
	ctl := http.NewServeMux()
	ctl.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			http.Error(w, "getrusage: "+err.Error(), http.StatusInternalServerError)
			return
		}
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		fmt.Fprintln(w, trips.n.Load(), int64(cpu))
	})
	ctl.HandleFunc("POST /flush-stats", func(w http.ResponseWriter, r *http.Request) {
		n, err := flushStats(r.Context(), pool)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, n)
	})
	ctl.HandleFunc("/debug/pprof/", pprof.Index)
	ctl.HandleFunc("/debug/pprof/profile", pprof.Profile)

	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctlSrv := &http.Server{Handler: ctl, ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(apiLn) }()
	go func() { errs <- ctlSrv.Serve(ctlLn) }()
	fmt.Printf("serving %s %s\n", apiLn.Addr(), ctlLn.Addr())

	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	code := 0
	select {
	case <-stdinClosed:
	case <-ctx.Done():
		code = fail("still running after %s: stopping (was the benchmark killed?)", childLifetime)
	case err := <-errs:
		code = fail("serve: %v", err)
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShut()
	_ = srv.Shutdown(shutCtx)
	_ = ctlSrv.Shutdown(shutCtx)
	return code
}

// benchServer is a running child, as the parent sees it.
type benchServer struct {
	mode     string // the server's name in messages ("base lease" for a base revision's)
	url, ctl string // http://127.0.0.1:port of the API and of the control endpoints
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan error
	stopped  sync.Once
}

// startServer starts a child serving mode on schema, and stops it when tb ends. exe is the test
// binary it runs: "" for this one, else another revision's (base_test.go), which speaks the same
// protocol (the environment above, its first line, the control port).
func startServer(tb testing.TB, exe, mode, url, schema string, conns int) *benchServer {
	tb.Helper()
	name := mode
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			tb.Fatalf("start the %s server: find the test binary: %v", mode, err)
		}
	} else {
		name = "base " + mode
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		envServe+"="+mode, envServeURL+"="+url, envServeSchema+"="+schema, envServeConns+"="+strconv.Itoa(conns))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the %s server: %v", name, err)
	}
	s := &benchServer{mode: name, cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
		s.done <- cmd.Wait()
	}()
	tb.Cleanup(func() { s.stop(tb) })
	select {
	case line, ok := <-lines:
		var api, ctl string
		if _, err := fmt.Sscanf(line, "serving %s %s", &api, &ctl); !ok || err != nil {
			tb.Fatalf("the %s server did not say where it listens (first line %q): see its error above", name, line)
		}
		s.url, s.ctl = "http://"+api, "http://"+ctl
	case <-time.After(30 * time.Second):
		tb.Fatalf("the %s server did not say where it listens within 30s", name)
	}
	return s
}

// stop closes the child's stdin, which it takes as the signal to shut down, and kills it if it
// has not exited 15s later. Calls after the first do nothing.
func (s *benchServer) stop(tb testing.TB) {
	s.stopped.Do(func() {
		_ = s.stdin.Close()
		select {
		case err := <-s.done:
			if err != nil {
				tb.Errorf("the %s server exited with %v", s.mode, err)
			}
		case <-time.After(15 * time.Second):
			_ = s.cmd.Process.Kill()
			tb.Errorf("the %s server did not stop within 15s of its stdin closing: killed it", s.mode)
		}
	})
}

// stats is what the server has done so far: its pool's round trips, and its process's CPU time
// (user and system).
func (s *benchServer) stats(ctx context.Context, client *http.Client) (trips int64, cpu time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.ctl+"/stats", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("read the %s server's stats: %w", s.mode, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("read the %s server's stats: %w", s.mode, err)
	}
	var ns int64
	if _, err := fmt.Sscan(string(b), &trips, &ns); err != nil || resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("the %s server's stats: status %d, %q: want two numbers", s.mode, resp.StatusCode, b)
	}
	return trips, time.Duration(ns), nil
}

// flushStats has every connection of pool flush its pending statistics, for the database
// profile (http_test.go): a PostgreSQL 15 backend otherwise keeps them up to 10s after it
// goes idle. A backend flushes before it answers ready for the next query, so they are flushed
// when this returns. It returns the number of statements (each a transaction) it ran, and fails
// when a connection is busy.
func flushStats(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	// A Store keeps a connection whose rollback it owes for up to 20 ms after the request that
	// left it (runtime/idem/owed.go), so the load's last connections come back a little after it.
	var conns []*pgxpool.Conn
	var total int32
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for deadline := time.Now().Add(2 * time.Second); ; {
		total, conns = pool.Stat().TotalConns(), pool.AcquireAllIdle(ctx)
		if len(conns) == int(total) || time.Now().After(deadline) {
			break
		}
		for _, c := range conns {
			c.Release()
		}
		conns = nil
		time.Sleep(5 * time.Millisecond)
	}
	if len(conns) != int(total) {
		return 0, fmt.Errorf("flush statistics: %d of the pool's %d connections are busy; the profile flushes them only once its load has ended", int(total)-len(conns), total)
	}
	for _, c := range conns {
		if _, err := c.Exec(ctx, flushSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return 0, fmt.Errorf("flush statistics: pg_stat_force_next_flush() (PostgreSQL 15 or later): %w", err)
		}
	}
	return len(conns), nil
}

// flushStats asks the child to flush its connections' statistics (see flushStats), and returns
// the number of statements that took.
func (s *benchServer) flushStats(ctx context.Context, client *http.Client) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ctl+"/flush-stats", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("flush the %s server's statistics: %w", s.mode, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var n int
	if err == nil && resp.StatusCode == http.StatusOK {
		_, err = fmt.Sscan(string(b), &n)
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("flush the %s server's statistics: status %d, %q, %v", s.mode, resp.StatusCode, b, err)
	}
	return n, nil
}

// TestBenchServers checks that the benchmark's servers are what its table calls them, over
// HTTP on real PostgreSQL: the ceiling creates payments without claiming or storing a key (a
// repeated key reaches the business code, which refuses it); the hand-written peer and the
// lease and transaction servers replay a repeated key from the key row they stored, refuse it
// for another body, and execute a storm of concurrent duplicates once.
func TestBenchServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode         string
		secondStatus int
		replayed     bool
		keyTable     string
		keyRows      int
	}{
		{serverCeiling, http.StatusUnprocessableEntity, false, idem.DefaultTable, 0},
		{serverPeer, http.StatusCreated, true, "peer_keys", 1},
		{serverPeerRow, http.StatusCreated, true, "peer_row_keys", 1},
		{serverPeerRowGuarded, http.StatusCreated, true, "peer_row_keys", 1},
		{serverPeerLease, http.StatusCreated, true, "peer_lease_keys", 1},
		{serverPeerLeaseRow, http.StatusCreated, true, "peer_lease_row_keys", 1},
		{serverHandwritten, http.StatusCreated, true, "handwritten_keys", 1},
		{serverLease, http.StatusCreated, true, idem.DefaultTable, 1},
		{serverTransaction, http.StatusCreated, true, idem.DefaultTable, 1},
		{serverCached, http.StatusCreated, true, idem.DefaultTable, 1},
		{serverLeaseHistory, http.StatusCreated, true, idem.DefaultTable, 1},
		{serverTransactionHistory, http.StatusCreated, true, idem.DefaultTable, 1},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sch, s, l := serveBenchForTest(t, tc.mode, 8)
			st, replayed, _, err := l.send(ctx, s, "k1")
			if err != nil || st != http.StatusCreated || replayed {
				t.Fatalf("first create: status %d, replayed %v, error %v; want 201, not a replay", st, replayed, err)
			}
			st, replayed, _, err = l.send(ctx, s, "k1")
			if err != nil || st != tc.secondStatus || replayed != tc.replayed {
				t.Fatalf("the same key again: status %d, replayed %v, error %v; want %d, replayed %v", st, replayed, err, tc.secondStatus, tc.replayed)
			}
			var keys, events int
			if err := sch.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+tc.keyTable+"), (SELECT count(*) FROM payment_events)").Scan(&keys, &events); err != nil {
				t.Fatal(err)
			}
			if keys != tc.keyRows || events != 1 {
				t.Errorf("%d rows in %s and %d ledger events; want %d key rows and 1 event", keys, tc.keyTable, events, tc.keyRows)
			}
			if err := checkOnce(ctx, sch.Pool, []string{"k1"}); err != nil {
				t.Error(err)
			}
			if tc.mode == serverCeiling {
				return
			}
			if st, _, err := sendBody(ctx, l, s, "k1", `{"amount_minor": 1, "currency": "RUB"}`); err != nil || st != http.StatusUnprocessableEntity {
				t.Errorf("the same key with another body: status %d, error %v; want 422", st, err)
			}
			// A storm: every client at once with one new key, one execution.
			answers := make([]struct {
				status   int
				replayed bool
				err      error
			}, l.clients)
			var wg sync.WaitGroup
			for i := range answers {
				wg.Go(func() {
					a := &answers[i]
					a.status, a.replayed, _, a.err = l.send(ctx, s, "storm")
				})
			}
			wg.Wait()
			executed := 0
			for _, a := range answers {
				switch {
				case a.err != nil:
					t.Fatal(a.err)
				case a.status == http.StatusCreated && !a.replayed:
					executed++
				case a.status == http.StatusCreated, a.status == http.StatusConflict:
				default:
					t.Errorf("a duplicate in the storm got status %d; want 201 (a replay) or 409", a.status)
				}
			}
			if executed != 1 {
				t.Errorf("%d of the storm's %d requests executed; want exactly 1", executed, len(answers))
			}
			if err := checkOnce(ctx, sch.Pool, []string{"k1", "storm"}); err != nil {
				t.Error(err)
			}
			if tc.mode != serverCached { // the replay cache answers a key whose row is gone
				// The key's row gone (expired and purged) while its payment stays: the work runs
				// again, its payment insert is refused with the writes that travel with the
				// outcome, and the key is answered 422, with nothing added.
				if st, _, _, err := l.send(ctx, s, "gone"); err != nil || st != http.StatusCreated {
					t.Fatalf("create with the key gone: status %d, error %v; want 201", st, err)
				}
				if _, err := sch.Pool.Exec(ctx, "DELETE FROM "+tc.keyTable+" WHERE key = 'gone'"); err != nil {
					t.Fatal(err)
				}
				if st, _, _, err := l.send(ctx, s, "gone"); err != nil || st != http.StatusUnprocessableEntity {
					t.Errorf("a key whose row is gone and whose payment exists: status %d, error %v; want 422", st, err)
				}
				if err := checkOnce(ctx, sch.Pool, []string{"gone"}); err != nil {
					t.Error(err)
				}
			}
			if tc.mode == serverPeerLease || tc.mode == serverPeerLeaseRow {
				checkPeerLeaseTakeover(ctx, t, sch.Pool, l, s, tc.mode == serverPeerLeaseRow)
			}
			if tc.keyTable == idem.DefaultTable {
				checkHistoryKept(ctx, t, sch.Pool, tc.mode == serverLeaseHistory || tc.mode == serverTransactionHistory)
			}
		})
	}
}

// checkHistoryKept checks that the runtime's servers keep the key's history exactly when their
// name says so: k1's claim and completion, or nothing at all. (Its replay and its refused
// mismatch are counted and written later, by the store's flusher: runtime/idem's history tests
// check that.)
func checkHistoryKept(ctx context.Context, t *testing.T, pool *pgxpool.Pool, want bool) {
	t.Helper()
	var kinds []string
	if err := pool.QueryRow(ctx, "SELECT coalesce(array_agg(DISTINCT kind ORDER BY kind), '{}') FROM "+idem.HistoryTableName(idem.DefaultTable)+" WHERE key = 'k1'").Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(kinds, " ")
	if wantKinds := "acquired completed"; want && got != wantKinds {
		t.Errorf("k1's history holds %q; want %q", got, wantKinds)
	}
	if !want && got != "" {
		t.Errorf("k1's history holds %q, on a server whose operation keeps none; want nothing", got)
	}
}

// checkPeerLeaseTakeover checks the lease peer's answers for a key whose claim is in flight:
// in-progress while its lease runs, key-reused for another body, and a takeover once the lease
// has run out (the work runs once more, for the request that took it over). row: the lease row
// peer, whose table is the runtime's key row.
func checkPeerLeaseTakeover(ctx context.Context, t *testing.T, pool *pgxpool.Pool, l *load, s *benchServer, row bool) {
	t.Helper()
	var body api.CreatePaymentJSONRequestBody
	if err := json.Unmarshal(benchBodyBytes, &body); err != nil {
		t.Fatal(err)
	}
	fp, err := peerFingerprint(&body)
	if err != nil {
		t.Fatal(err)
	}
	insert, fpArg := `INSERT INTO peer_lease_keys (tenant, key, fingerprint, owner, lease_until)
		VALUES ($1, 'held', $2, 1, now() + interval '1 hour'), ($1, 'abandoned', $2, 2, now() - interval '1 second')`, any(fp[:])
	if row {
		insert = `INSERT INTO peer_lease_row_keys (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at)
		VALUES ($1, '', 'held', 'createPayment', $2, 'in_flight', gen_random_uuid(), now() + interval '1 hour', now() + interval '1 day'),
			($1, '', 'abandoned', 'createPayment', $2, 'in_flight', gen_random_uuid(), now() - interval '1 second', now() + interval '1 day')`
		fpArg = hex.EncodeToString(fp[:])
	}
	if _, err := pool.Exec(ctx, insert, benchTenant, fpArg); err != nil {
		t.Fatal(err)
	}
	if st, _, _, err := l.send(ctx, s, "held"); err != nil || st != http.StatusConflict {
		t.Errorf("a key in flight under a live lease: status %d, error %v; want 409", st, err)
	}
	if st, _, err := sendBody(ctx, l, s, "held", `{"amount_minor": 1, "currency": "RUB"}`); err != nil || st != http.StatusUnprocessableEntity {
		t.Errorf("a key in flight, with another body: status %d, error %v; want 422", st, err)
	}
	if st, replayed, _, err := l.send(ctx, s, "abandoned"); err != nil || st != http.StatusCreated || replayed {
		t.Errorf("a key whose lease ran out: status %d, replayed %v, error %v; want 201 from a takeover", st, replayed, err)
	}
	if st, replayed, _, err := l.send(ctx, s, "abandoned"); err != nil || st != http.StatusCreated || !replayed {
		t.Errorf("the taken-over key again: status %d, replayed %v, error %v; want its replay", st, replayed, err)
	}
	if err := checkOnce(ctx, pool, []string{"abandoned"}); err != nil {
		t.Error(err)
	}
}

// sendBody is load.send with another body: the status and whether it was a replay.
func sendBody(ctx context.Context, l *load, s *benchServer, key, body string) (int, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/payments", strings.NewReader(body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(tenantHeader, benchTenant)
	req.Header.Set("Idempotency-Key", key)
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed) == "true", err
}

// TestGuardedPeerFingerprintsAsTheRuntime checks that the guarded row peer does the runtime's
// fingerprinting work and no less: for the same request it stores the fingerprint the
// transaction-mode server stores, and a body that differs only in key order and white space, or
// in the excluded /simulate_failure, replays on both.
func TestGuardedPeerFingerprintsAsTheRuntime(t *testing.T) {
	ctx := context.Background()
	stored := map[string]string{}
	for _, tc := range []struct{ mode, table string }{
		{serverTransaction, idem.DefaultTable},
		{serverPeerRowGuarded, "peer_row_keys"},
	} {
		sch, s, l := serveBenchForTest(t, tc.mode, 1)
		st, replayed, err := sendBody(ctx, l, s, "k1", benchBody)
		if err != nil || st != http.StatusCreated || replayed {
			t.Fatalf("%s: first create: status %d, replayed %v, error %v; want 201, not a replay", tc.mode, st, replayed, err)
		}
		for _, body := range []string{
			"{ \"currency\":\"RUB\",\n\"amount_minor\" :19900 }",
			`{"amount_minor": 19900, "currency": "RUB", "simulate_failure": false}`,
		} {
			st, replayed, err = sendBody(ctx, l, s, "k1", body)
			if err != nil || st != http.StatusCreated || !replayed {
				t.Errorf("%s: the same key with body %s: status %d, replayed %v, error %v; want 201, a replay", tc.mode, body, st, replayed, err)
			}
		}
		var fp string
		if err := sch.Pool.QueryRow(ctx, "SELECT fingerprint FROM "+tc.table).Scan(&fp); err != nil {
			t.Fatal(err)
		}
		stored[tc.mode] = fp
	}
	if stored[serverPeerRowGuarded] != stored[serverTransaction] {
		t.Errorf("the guarded peer stored fingerprint %s, the transaction-mode server %s; want the same", stored[serverPeerRowGuarded], stored[serverTransaction])
	}
}

// serveBenchForTest serves bench server mode in this process over HTTP, on a schema of its own
// with the example's tables, for a test; clients is the load's size. Everything ends with t.
func serveBenchForTest(t *testing.T, mode string, clients int) (*idemtest.Schema, *benchServer, *load) {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	if err := payments.Migrate(context.Background(), sch.Pool); err != nil {
		t.Fatal(err)
	}
	h, err := benchHandler(mode, sch.Pool, sch.Name, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	l := newLoad(clients)
	t.Cleanup(l.client.CloseIdleConnections)
	return sch, &benchServer{mode: mode, url: srv.URL}, l
}
