package payments

// Fault tests: the real handler stack behind a real HTTP server on loopback, while the database
// goes away, a backend is killed, the pool runs dry, a handler panics, a client hangs up or the
// server process dies. Every test is bounded: each request by faultBound, each wait by its own
// deadline. The ones that stop the database run it themselves (scripts/pg.sh), so no other test
// sees the outage. Deterministic fault points come from a pgx tracer on the handler's pool
// (hookTracer): it runs the test's hook when a chosen statement starts, on the request's own
// goroutine, so "inside the handler" or "at the commit" is exact, not a matter of timing.
//
// Guarantees that today's runtime does not keep are asserted in faults_pending_test.go, behind
// the faultpending build tag, until the runtime is fixed.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// faultBound is how long any one request may take in a fault test before it counts as hung.
const faultBound = 20 * time.Second

// hookTracer calls a test's hook, once, when a statement it picks starts on a connection of the
// pool. The hook runs where the statement was issued (the handler, or the runtime), before the
// statement is sent.
type hookTracer struct {
	mu    sync.Mutex
	match func(sql string) bool
	hook  func(ctx context.Context, conn *pgx.Conn)
	fired chan struct{}
}

// arm makes the next statement that matches run hook; the channel closes when it does.
func (h *hookTracer) arm(at point, hook func(ctx context.Context, conn *pgx.Conn)) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.match, h.hook, h.fired = at.match, hook, make(chan struct{})
	return h.fired
}

func (h *hookTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	h.mu.Lock()
	match, hook, fired := h.match, h.hook, h.fired
	fire := match != nil && match(data.SQL)
	if fire {
		h.match, h.hook = nil, nil
	}
	h.mu.Unlock()
	if fire {
		close(fired) // before the hook: a hook may panic or never return
		hook(ctx, conn)
	}
	return ctx
}

func (h *hookTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart fires for a batch holding a statement that matches: the runtime sends its
// transaction-mode begin with the claim, and the completion with the commit, as batches.
//
// A lease-mode claim's batch also begins, and commits the claim before the business begin: that
// commit is the claim's own, not the one atCommit means, so it is not offered to the hook.
func (h *hookTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	begins := slices.ContainsFunc(data.Batch.QueuedQueries, func(q *pgx.QueuedQuery) bool { return strings.HasPrefix(q.SQL, "begin") })
	for _, q := range data.Batch.QueuedQueries {
		if begins && strings.HasPrefix(q.SQL, "commit") {
			continue
		}
		ctx = h.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.SQL, Args: q.Arguments})
	}
	return ctx
}
func (h *hookTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (h *hookTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// point is a statement a fault is injected at. begin and commit are pgx's own; the completion is
// the runtime's fenced UPDATE, found by what it must write.
type point struct {
	name  string
	match func(sql string) bool
}

var (
	atBegin        = point{"the business transaction's begin", func(sql string) bool { return strings.HasPrefix(sql, "begin") }}
	atCommit       = point{"the commit", func(sql string) bool { return strings.HasPrefix(sql, "commit") }}
	atLedgerInsert = point{"the handler's ledger insert", func(sql string) bool { return strings.Contains(sql, "INSERT INTO payment_events") }}
	atCompletion   = point{"the completion", func(sql string) bool {
		return strings.Contains(sql, "UPDATE ") && strings.Contains(sql, "SET state = 'complete'")
	}}
)

// faultEnv is env (e2e_test.go) whose pool carries a hookTracer, with the idem.Config tuned by
// the test.
func newFaultEnv(t *testing.T, maxConns int32, tune func(*idem.Config)) (*env, *hookTracer) {
	t.Helper()
	tr := &hookTracer{}
	// The schema's reservation of the server's connections covers the fault pool's.
	base := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: maxConns})
	schema := *base
	schema.Pool = faultPool(t, base.URL, base.Name, maxConns, tr)
	if err := Migrate(context.Background(), schema.Pool); err != nil {
		t.Fatal(err)
	}
	cfg := schema.Config()
	if tune != nil {
		tune(cfg)
	}
	return serveFault(t, &schema, cfg), tr
}

// faultPool is the handler's pool, traced by tr (nil for none), with search_path set to schema
// when it is not empty. Closing it waits for every connection to come back, which a leaked
// transaction never does: after 10s the leak fails the test, its backends are terminated (so that
// the schema can still be dropped) and the pool is left open, instead of hanging the run.
func faultPool(t *testing.T, url, schema string, maxConns int32, tr pgx.QueryTracer) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	app := fmt.Sprintf("idemgen-faults-%d", faultPools.Add(1))
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = tr
	cfg.ConnConfig.DialFunc = dialCuttable
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for pool.Stat().AcquiredConns() > 0 {
			if time.Now().After(deadline) {
				t.Errorf("%d connections of the handler's pool were never given back (a transaction nobody ends); terminating their backends",
					pool.Stat().AcquiredConns())
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if c, err := pgx.Connect(ctx, url); err == nil {
					_, _ = c.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = $1`, app)
					_ = c.Close(ctx)
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		pool.Close()
	})
	return pool
}

var faultPools atomic.Int64

// serveFault serves the example's handler for schema on loopback, with a client whose every
// request is bounded by faultBound.
func serveFault(t *testing.T, schema *idemtest.Schema, cfg *idem.Config) *env {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	h, store, err := newService(schema.Pool, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	// Last, after the server has closed: the store's background release retries, which log,
	// end before the test does (a log after it would panic the test binary).
	t.Cleanup(store.Close)
	srv := httptest.NewUnstartedServer(h)
	// A panicking handler makes net/http log a stack trace; keep it in the test's log.
	srv.Config.ErrorLog = log.New(tWriter{t}, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = faultBound
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return &env{t: t, url: srv.URL, client: client, schema: schema}
}

// adminConn is a connection outside the traced pool, for killing backends and reading state.
func adminConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// terminate ends the backend behind conn and waits until it is gone.
func terminate(admin *pgx.Conn, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var gone bool
	pid := conn.PgConn().PID()
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, int32(pid)).Scan(&gone); err != nil {
		return fmt.Errorf("pg_terminate_backend(%d): %w", pid, err)
	}
	if !gone {
		return fmt.Errorf("backend %d was signalled but did not end within 10s", pid)
	}
	return nil
}

// ledgerMatchesKeys returns every way the ledger and the key table disagree: a ledger row for a
// key that is not complete (work that committed without its outcome, or survived a rollback),
// a complete createPayment key without its ledger row (an outcome stored for work that did not
// commit), and a key with two ledger rows (executed twice).
func (e *env) ledgerMatchesKeys() []string {
	e.t.Helper()
	keys := pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()
	ledger := pgx.Identifier{e.schema.Name, "payment_events"}.Sanitize()
	rows, err := e.schema.Pool.Query(context.Background(), `
		SELECT 'ledger row without a complete key: ' || ev.idempotency_key
		FROM `+ledger+` ev
		WHERE ev.kind = 'authorized' AND NOT EXISTS (
			SELECT 1 FROM `+keys+` k WHERE k.tenant = ev.tenant_id AND k.key = ev.idempotency_key
				AND k.operation = 'createPayment' AND k.state = 'complete')
		UNION ALL
		SELECT 'complete key without its ledger row: ' || k.key
		FROM `+keys+` k
		WHERE k.operation = 'createPayment' AND k.state = 'complete' AND k.status = 201 AND NOT EXISTS (
			SELECT 1 FROM `+ledger+` ev WHERE ev.tenant_id = k.tenant AND ev.idempotency_key = k.key AND ev.kind = 'authorized')
		UNION ALL
		SELECT 'key executed ' || count(*) || ' times: ' || idempotency_key
		FROM `+ledger+` WHERE kind = 'authorized' GROUP BY tenant_id, idempotency_key HAVING count(*) > 1`)
	if err != nil {
		e.t.Fatalf("compare the ledger with the key table: %v", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("compare the ledger with the key table: %v", err)
	}
	return out
}

func (e *env) wantLedgerMatchesKeys() {
	e.t.Helper()
	if bad := e.ledgerMatchesKeys(); len(bad) > 0 {
		e.t.Errorf("the ledger and the key table disagree (%d):\n  %s", len(bad), strings.Join(bad[:min(10, len(bad))], "\n  "))
	}
}

// keyState is the key's row state ("in_flight", "complete") or "" when there is none.
func (e *env) keyState(tenant, key string) string {
	e.t.Helper()
	var state string
	err := e.schema.Pool.QueryRow(context.Background(),
		`SELECT state FROM `+pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()+` WHERE tenant = $1 AND key = $2`,
		tenant, key).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		e.t.Fatalf("read the state of key %s: %v", key, err)
	}
	return state
}

// waitReleased waits until the key's row is gone: the request that held it has given it back.
func (e *env) waitReleased(tenant, key string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.keyState(tenant, key) != "" {
		if time.Now().After(deadline) {
			e.t.Fatalf("key %s is still %s 10s after its request failed: it was not released, so a retry gets in-progress until the lease ends",
				key, e.keyState(tenant, key))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantFreshRetry sends the request again: the key was given back, so it runs anew and leaves one
// ledger row.
func (e *env) wantFreshRetry(tenant, key string) {
	e.t.Helper()
	resp := e.send(create(tenant, key, body19900))
	if resp.status != http.StatusCreated || resp.replayed() {
		e.t.Errorf("retry of %s after the fault: %d (replayed %v), want a fresh 201; body %s", key, resp.status, resp.replayed(), resp.body)
	}
	if n := e.events("authorized", key); n != 1 {
		e.t.Errorf("retry of %s after the fault: %d ledger rows, want 1", key, n)
	}
}

// TestFaultBackendTerminatedAroundTheHandler kills the connection of the request at each step
// between the claim and the commit. The request is answered 503 store-unavailable (never 500,
// never a hang), nothing it did survives, the key is given back, and a retry runs once.
func TestFaultBackendTerminatedAroundTheHandler(t *testing.T) {
	t.Parallel()
	for _, at := range []point{atBegin, atCompletion, atCommit} {
		t.Run(at.name, func(t *testing.T) {
			t.Parallel()
			backendTerminated(t, at)
		})
	}
}

// cuttableConn is a connection to PostgreSQL whose answers a test can hold back and then cut
// off: the server runs what it was sent, and the client never reads what it answered.
type cuttableConn struct {
	net.Conn
	mu   sync.Mutex
	held chan struct{} // closed when the held answers are cut off; nil while reads pass
}

func dialCuttable(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cuttableConn{Conn: c}, nil
}

// hold makes reads wait from now on; cut ends them with an error and closes the connection.
// prepareOnEveryConn prepares each of sqls, named by its text as pgx looks them up, on all n
// connections of pool, held at once so that they are n different ones.
func prepareOnEveryConn(t *testing.T, pool *pgxpool.Pool, n int, sqls ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultBound)
	defer cancel()
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatalf("take connection %d of %d to prepare the handler's statements on: %v", len(conns)+1, n, err)
		}
		conns = append(conns, c)
		for _, sql := range sqls {
			if _, err := c.Conn().Prepare(ctx, sql, sql); err != nil {
				t.Fatalf("prepare %q: %v", sql, err)
			}
		}
	}
}

func (c *cuttableConn) hold() (cut func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := make(chan struct{})
	c.held = held
	var once sync.Once
	return func() {
		once.Do(func() {
			close(held)
			c.Conn.Close()
		})
	}
}

func (c *cuttableConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if held != nil {
		<-held
		return 0, fmt.Errorf("the test cut the connection before its answer was read: %w", net.ErrClosed)
	}
	return c.Conn.Read(b)
}

// TestFaultConnectionCutAfterCommitKeepsTheOutcome cuts the request's connection after its
// COMMIT ran on the server and before the answer was read: the request cannot tell whether it
// committed, and gives the key back, which must leave the completed row alone. The work is kept
// once (one ledger row), and the retry replays it instead of running it again.
func TestFaultConnectionCutAfterCommitKeepsTheOutcome(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	// The cut holds the connection's reads from the batch that carries the COMMIT on, so that
	// batch must not need a round trip of its own first: pgx prepares a statement the first time
	// a connection sees it. The handler's deferred writes are prepared on every connection here.
	prepareOnEveryConn(t, e.schema.Pool, 4, createPaymentSQL, recordSQL)
	const tenant, key = "acme", "cut-after-commit"
	committed := make(chan error, 1)
	fired := tr.arm(atCommit, func(_ context.Context, conn *pgx.Conn) {
		cut := conn.PgConn().Conn().(*cuttableConn).hold()
		go func() { // once the commit is visible from another connection, cut the answer off
			defer cut()
			deadline := time.Now().Add(10 * time.Second)
			for e.keyState(tenant, key) != "complete" {
				if time.Now().After(deadline) {
					committed <- errors.New("the commit never became visible within 10s")
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			committed <- nil
		}()
	})
	resp := e.send(create(tenant, key, body19900))
	select {
	case <-fired:
	default:
		t.Fatalf("%s never ran: the fault was never injected (has the runtime's SQL changed?)", atCommit.name)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(faultBound):
		t.Fatal("the fault never cut the connection")
	}
	t.Logf("the request whose commit answer was lost: %d %s", resp.status, resp.body)
	if n := e.events("authorized", key); n != 1 {
		t.Fatalf("%d ledger rows after the commit whose answer was lost; want 1 (it committed)", n)
	}
	if st := e.keyState(tenant, key); st != "complete" {
		t.Fatalf("the key is %q after the commit whose answer was lost; want complete: the release deleted the stored outcome", st)
	}
	retry := e.send(create(tenant, key, body19900))
	if retry.status != http.StatusCreated || !retry.replayed() {
		t.Errorf("retry after the lost commit answer: %d (replayed %v); want the stored 201 replayed; body %s", retry.status, retry.replayed(), retry.body)
	}
	if n := e.events("authorized", key); n != 1 {
		t.Errorf("%d ledger rows after the retry; want 1 (the work ran again)", n)
	}
	e.wantLedgerMatchesKeys()
}

// backendTerminated is one run of the test above, at the statement at.
func backendTerminated(t *testing.T, at point) {
	e, tr := newFaultEnv(t, 4, nil)
	admin := adminConn(t, e.schema.URL)
	var killErr error
	fired := tr.arm(at, func(_ context.Context, conn *pgx.Conn) { killErr = terminate(admin, conn) })
	const tenant, key = "acme", "killed-1"
	resp := e.send(create(tenant, key, body19900))
	select {
	case <-fired:
	default:
		t.Fatalf("%s never ran: the fault was never injected (has the runtime's SQL changed?)", at.name)
	}
	if killErr != nil {
		t.Fatal(killErr)
	}
	wantProblem(t, "request whose backend was terminated", resp, http.StatusServiceUnavailable, "store-unavailable")
	if resp.header.Get("Retry-After") == "" {
		t.Error("the 503 has no Retry-After")
	}
	e.waitReleased(tenant, key)
	if n := e.events("authorized", key); n != 0 {
		t.Errorf("%d ledger rows for the failed request, want 0 (its transaction must have rolled back)", n)
	}
	e.wantLedgerMatchesKeys()
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}

// TestFaultBackendTerminatedInsideTheHandlerLeavesNothing kills the connection while the handler
// writes. Whatever the status (see faults_pending_test.go for the 503 it should be), the work
// is rolled back, the key given back, and a retry runs once.
func TestFaultBackendTerminatedInsideTheHandlerLeavesNothing(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	admin := adminConn(t, e.schema.URL)
	var killErr error
	fired := tr.arm(atLedgerInsert, func(_ context.Context, conn *pgx.Conn) { killErr = terminate(admin, conn) })
	const tenant, key = "acme", "killed-in-handler"
	resp := e.send(create(tenant, key, body19900))
	select {
	case <-fired:
	default:
		t.Fatal("the handler's ledger insert never ran: the fault was never injected")
	}
	if killErr != nil {
		t.Fatal(killErr)
	}
	if resp.status < 500 {
		t.Fatalf("request whose backend was terminated inside the handler: %d, want a 5xx; body %s", resp.status, resp.body)
	}
	e.waitReleased(tenant, key)
	if n := e.events("authorized", key); n != 0 {
		t.Errorf("%d ledger rows for the failed request, want 0", n)
	}
	if n := e.count(`SELECT count(*) FROM payments WHERE payment_id = $1`, derivedID("pay_", tenant, key)); n != 0 {
		t.Errorf("the payment row written before the kill survived (%d rows), want it rolled back", n)
	}
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}

// TestFaultPoolExhausted holds every pool connection: a request cannot claim, and is answered
// 503 after StoreTimeout, without a claim or a handler run; once connections are free it runs.
func TestFaultPoolExhausted(t *testing.T) {
	t.Parallel()
	const storeTimeout = 300 * time.Millisecond
	e, _ := newFaultEnv(t, 2, func(c *idem.Config) { c.StoreTimeout = storeTimeout })
	ctx := context.Background()
	var held []*pgxpool.Conn
	giveBack := func() {
		for _, c := range held {
			c.Release()
		}
		held = nil
	}
	// Also when the request hangs and the test fails: the server's Close waits for its handler,
	// which waits for a connection.
	t.Cleanup(giveBack)
	for range 2 {
		c, err := e.schema.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	const tenant, key = "acme", "starved"
	start := time.Now()
	resp := e.send(create(tenant, key, body19900))
	took := time.Since(start)
	giveBack()
	t.Logf("answered %d after %s (StoreTimeout %s)", resp.status, took.Round(time.Millisecond), storeTimeout)
	wantProblem(t, "request with the pool exhausted", resp, http.StatusServiceUnavailable, "store-unavailable")
	if took < storeTimeout {
		// Not a timing assertion on speed: answering before the timeout means it did not wait at all.
		t.Errorf("answered after %s, before StoreTimeout %s: it did not wait for a connection", took, storeTimeout)
	}
	if s := e.keyState(tenant, key); s != "" {
		t.Errorf("the starved request left its key %s, want no row (it never claimed)", s)
	}
	e.wantFreshRetry(tenant, key)
}

// TestFaultHandlerPanicRollsBackAndReleases makes the handler panic after it wrote the payment:
// the transaction is rolled back, the key released, and the server goes on serving (a retry runs
// once). The 500 problem it should answer is in faults_pending_test.go.
func TestFaultHandlerPanicRollsBackAndReleases(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	fired := tr.arm(atLedgerInsert, func(context.Context, *pgx.Conn) { panic("simulated handler bug") })
	const tenant, key = "acme", "panics"
	resp, err := e.do(e.newRequest(create(tenant, key, body19900)))
	select {
	case <-fired:
	default:
		t.Fatal("the handler's ledger insert never ran: the panic was never injected")
	}
	if err == nil && resp.status < 500 {
		t.Fatalf("panicking handler answered %d, want no success; body %s", resp.status, resp.body)
	}
	e.waitReleased(tenant, key)
	if n := e.count(`SELECT count(*) FROM payments WHERE payment_id = $1`, derivedID("pay_", tenant, key)); n != 0 {
		t.Errorf("the payment row written before the panic survived (%d rows), want it rolled back", n)
	}
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}

// TestFaultClientDisconnects hangs up while the handler runs: the handler's context is
// cancelled, its work rolled back and the key released, and the retry runs once.
func TestFaultClientDisconnects(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	reached := make(chan struct{})
	cancelled := make(chan bool, 1)
	tr.arm(atLedgerInsert, func(ctx context.Context, _ *pgx.Conn) {
		close(reached)
		select {
		case <-ctx.Done():
			cancelled <- true
		case <-time.After(10 * time.Second):
			cancelled <- false
		}
	})
	const tenant, key = "acme", "hangs-up"
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	clientErr := make(chan error, 1)
	go func() {
		_, err := e.do(e.newRequest(create(tenant, key, body19900)).WithContext(ctx))
		clientErr <- err
	}()
	select {
	case <-reached:
	case <-time.After(faultBound):
		t.Fatal("the handler did not reach its ledger insert")
	}
	hangUp()
	if !<-cancelled {
		t.Fatal("the handler's context was not cancelled within 10s of the client hanging up")
	}
	if err := <-clientErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the client's request ended with %v, want its own cancellation", err)
	}
	e.waitReleased(tenant, key)
	if n := e.count(`SELECT count(*) FROM payments WHERE payment_id = $1`, derivedID("pay_", tenant, key)); n != 0 {
		t.Errorf("the payment row written before the hang-up survived (%d rows), want it rolled back", n)
	}
	e.wantFreshRetry(tenant, key)
	e.wantLedgerMatchesKeys()
}

// The killed-server test runs the payments server in a child process (this test binary, through
// TestMain) whose handler stops forever inside its transaction, and kills it with SIGKILL.
const (
	childURL    = "IDEMGEN_FAULT_CHILD_URL"
	childSchema = "IDEMGEN_FAULT_CHILD_SCHEMA"
)

// childServer serves the example like main does, on a free loopback port it prints, and its
// handler blocks at the ledger insert (printing "blocked") until the process is killed. It ends
// itself after a minute, should the parent die first.
func childServer() int {
	time.AfterFunc(time.Minute, func() { os.Exit(3) })
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(childURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	schema := os.Getenv(childSchema)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	tr := &hookTracer{}
	tr.arm(atLedgerInsert, func(context.Context, *pgx.Conn) {
		fmt.Println("blocked")
		select {}
	})
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	h, err := NewHandler(pool, &idem.Config{Schema: schema}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	fmt.Println("addr", ln.Addr().String())
	fmt.Fprintln(os.Stderr, "child: serve:", http.Serve(ln, h))
	return 1
}

// TestFaultServerKilledMidRequest: the process holding a key dies inside its handler. Until the
// lease ends, retries get 409 in-progress; after it, a burst of retries takes the key over and
// exactly one of them runs, once. The lease (60s in the spec) is run out by moving its end in the
// key table rather than by waiting a minute.
func TestFaultServerKilledMidRequest(t *testing.T) {
	t.Parallel()
	e, _ := newFaultEnv(t, 16, nil)
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childURL+"="+e.schema.URL, childSchema+"="+e.schema.Name)
	child.Stderr = tWriter{t}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the child server exited before %s", what)
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("the child server did not report %s within 30s", what)
		}
		return ""
	}
	addr, ok := strings.CutPrefix(next("its address"), "addr ")
	if !ok {
		t.Fatal("the child server's first line is not its address")
	}

	const tenant, key = "acme", "orphaned"
	toChild := &env{t: t, url: "http://" + addr, client: &http.Client{Timeout: faultBound}, schema: e.schema}
	childErr := make(chan error, 1)
	go func() {
		_, err := toChild.do(toChild.newRequest(create(tenant, key, body19900)))
		childErr <- err
	}()
	if l := next("that the handler blocked"); l != "blocked" {
		t.Fatalf("the child server said %q, want blocked", l)
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL: no cleanup of any kind
		t.Fatal(err)
	}
	_ = child.Wait()
	exited = true
	if err := <-childErr; err == nil {
		t.Error("the request to the killed server got an answer, want a broken connection")
	}
	if s := e.keyState(tenant, key); s != "in_flight" {
		t.Fatalf("after the kill the key is %q, want in_flight (the claim was committed before the handler ran)", s)
	}

	// The lease still runs: the key is held.
	resp := e.send(create(tenant, key, body19900))
	wantProblem(t, "retry while the dead holder's lease runs", resp, http.StatusConflict, "in-progress")
	if ra, err := strconv.Atoi(resp.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds ≥ 1", resp.header.Get("Retry-After"))
	}

	// The lease runs out: one of a burst of retries takes over.
	if _, err := e.schema.Pool.Exec(context.Background(),
		`UPDATE `+pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()+` SET lease_expires_at = now() WHERE tenant = $1 AND key = $2`,
		tenant, key); err != nil {
		t.Fatal(err)
	}
	executedOnce(t, e.burst(8, create(tenant, key, body19900)), http.StatusCreated)
	if n := e.events("authorized", key); n != 1 {
		t.Errorf("%d ledger rows for the orphaned key after the takeover, want exactly 1", n)
	}
	if n := e.count(`SELECT attempt FROM `+pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()+` WHERE tenant = $1 AND key = $2`, tenant, key); n != 2 {
		t.Errorf("attempt %d after the takeover, want 2 (one claim by the dead server, one takeover)", n)
	}
	if r := e.send(create(tenant, key, body19900)); r.status != http.StatusCreated || !r.replayed() {
		t.Errorf("retry after the takeover completed: %d (replayed %v), want the stored 201", r.status, r.replayed())
	}
	e.wantLedgerMatchesKeys()
}

// ownServer is a throwaway PostgreSQL of one test's own (scripts/pg.sh), which the test may stop
// and start again without disturbing any other.
type ownServer struct {
	t   *testing.T
	dir string
	url string
}

func startOwnServer(t *testing.T) *ownServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "idemgen-faults-pg.")
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../scripts/pg.sh")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script, "start", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	s := &ownServer{t: t, dir: dir, url: strings.TrimSpace(string(out))}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("stop the test's own PostgreSQL: %v\n%s", err, out)
		}
	})
	if err != nil {
		t.Fatalf("start a PostgreSQL of the test's own with scripts/pg.sh: %v\n%s", err, stderr.String())
	}
	return s
}

// pgCtl runs pg_ctl on the server, as the user that owns it (pg.sh's rules).
func (s *ownServer) pgCtl(args ...string) {
	s.t.Helper()
	bin := "pg_ctl"
	if d := os.Getenv("PG_BINDIR"); d != "" {
		bin = filepath.Join(d, "pg_ctl")
	} else if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(m) > 0 {
		bin = m[len(m)-1]
	}
	argv := append([]string{bin, "-D", filepath.Join(s.dir, "data")}, args...)
	if os.Geteuid() == 0 {
		argv = append([]string{"runuser", "-u", "postgres", "--"}, argv...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		s.t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// stop shuts the server down the way an operator's restart does: fast, so open transactions are
// aborted and their connections closed.
func (s *ownServer) stop() { s.pgCtl("-m", "fast", "-w", "stop") }

// start brings it back with the options pg.sh started it with (pg_ctl keeps them for restart).
func (s *ownServer) start() {
	s.pgCtl("-w", "-t", "60", "-l", filepath.Join(s.dir, "server.log"), "restart")
}

// shot is one request of a storm and what it got.
type shot struct {
	key        string
	start, end time.Time
	resp       response
	err        error
}

// storm is a bounded load of distinct payments from a few workers, until stop is called or it
// has sent max requests.
type storm struct {
	e     *env
	mu    sync.Mutex
	shots []shot
	done  chan struct{}
	wg    sync.WaitGroup
	n     atomic.Int64
}

func startStorm(e *env, workers, max int) *storm {
	s := &storm{e: e, done: make(chan struct{})}
	for w := range workers {
		s.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-s.done:
					return
				default:
				}
				if s.n.Add(1) > int64(max) {
					return
				}
				key := fmt.Sprintf("storm-%d-%d", w, i)
				sh := shot{key: key, start: time.Now()}
				sh.resp, sh.err = e.do(e.newRequest(create("acme", key, body19900)))
				sh.end = time.Now()
				s.mu.Lock()
				s.shots = append(s.shots, sh)
				s.mu.Unlock()
				if sh.err == nil && sh.resp.status == http.StatusServiceUnavailable {
					time.Sleep(20 * time.Millisecond) // a client honouring Retry-After would wait longer
				}
			}
		})
	}
	return s
}

func (s *storm) stop() []shot {
	close(s.done)
	s.wg.Wait()
	return s.shots
}

// waitFor waits until at least n shots that started after since satisfy ok.
func (s *storm) waitFor(what string, n int, since time.Time, ok func(shot) bool) {
	s.e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		got := 0
		for _, sh := range s.shots {
			if !sh.start.Before(since) && ok(sh) {
				got++
			}
		}
		s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			s.e.t.Fatalf("storm: only %d of %d %s within 30s", got, n, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func created(sh shot) bool { return sh.err == nil && sh.resp.status == http.StatusCreated }
func unavailable(sh shot) bool {
	return sh.err == nil && sh.resp.status == http.StatusServiceUnavailable
}

// restartRun is what a storm across a database restart saw.
type restartRun struct {
	e                     *env
	shots                 []shot
	stopBegan, stopDone   time.Time
	startBegan, startDone time.Time
}

// stormAcrossRestart runs a storm against the example on a PostgreSQL of the test's own, stops
// the database under it, keeps the storm going through the outage, starts it again, and waits
// for requests to succeed again.
func stormAcrossRestart(t *testing.T) *restartRun {
	t.Helper()
	pg := startOwnServer(t)
	ctx := context.Background()
	pool := faultPool(t, pg.url, "", 8, nil)
	m, err := idem.NewMigrator(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	schema := &idemtest.Schema{Name: idem.DefaultSchema, Pool: pool, URL: pg.url, Table: idem.DefaultTable}
	e := serveFault(t, schema, &idem.Config{Schema: idem.DefaultSchema, StoreTimeout: time.Second})

	s := startStorm(e, 6, 3000)
	r := &restartRun{e: e}
	func() {
		defer func() { r.shots = s.stop() }()
		s.waitFor("payments created before the restart", 20, time.Time{}, created)
		r.stopBegan = time.Now()
		pg.stop()
		r.stopDone = time.Now()
		s.waitFor("requests answered while the database was down", 20, r.stopDone, func(shot) bool { return true })
		time.Sleep(500 * time.Millisecond) // an outage long enough for every worker to meet it several times
		r.startBegan = time.Now()
		pg.start()
		r.startDone = time.Now()
		s.waitFor("payments created after the restart", 20, r.startDone, created)
	}()
	t.Logf("%d requests; database stopped in %s, down for %s, started in %s",
		len(r.shots), r.stopDone.Sub(r.stopBegan).Round(time.Millisecond), r.startBegan.Sub(r.stopDone).Round(time.Millisecond),
		r.startDone.Sub(r.startBegan).Round(time.Millisecond))
	return r
}

// check asserts what must hold of every storm across a restart; strict also refuses a 500 for
// the requests that were in flight when the database went down.
func (r *restartRun) check(t *testing.T, strict bool) {
	t.Helper()
	var byStatus = map[int]int{}
	var fiveHundreds []string
	for _, sh := range r.shots {
		if sh.err != nil {
			t.Errorf("%s: no answer (a hang past %s, or a broken connection): %v", sh.key, faultBound, sh.err)
			continue
		}
		byStatus[sh.resp.status]++
		switch st := sh.resp.status; {
		case st == http.StatusCreated:
		case st == http.StatusServiceUnavailable:
			wantProblem(t, sh.key, sh.resp, st, "store-unavailable")
		case st == http.StatusInternalServerError && !strict && sh.start.Before(r.stopDone) && sh.end.After(r.stopBegan):
			// In flight when the server shut down: known runtime defect, see faults_pending_test.go.
			fiveHundreds = append(fiveHundreds, sh.key)
		default:
			t.Errorf("%s: %d %s, want 201 or 503 store-unavailable", sh.key, st, bytes.TrimSpace(sh.resp.body))
		}
		if sh.start.After(r.stopDone) && sh.end.Before(r.startBegan) && sh.resp.status != http.StatusServiceUnavailable {
			t.Errorf("%s: sent while the database was down, answered %d, want 503", sh.key, sh.resp.status)
		}
	}
	t.Logf("answers: %v; 500s of requests in flight at the shutdown: %d", byStatus, len(fiveHundreds))

	// Every completed key replays the same answer; every other one is still usable.
	var stuck []string
	for _, sh := range r.shots {
		if sh.err != nil {
			continue
		}
		again := r.e.send(create("acme", sh.key, body19900))
		if strict && sh.resp.status != http.StatusCreated {
			again = r.retryWhileInProgress(t, sh.key, again)
		}
		switch {
		case sh.resp.status == http.StatusCreated:
			if again.status != http.StatusCreated || !again.replayed() || !bytes.Equal(again.body, sh.resp.body) {
				t.Errorf("%s completed before, and its retry got %d (replayed %v) %s, want the same 201 replayed", sh.key, again.status, again.replayed(), again.body)
			}
		case again.status == http.StatusCreated:
		case again.status == http.StatusConflict && !strict:
			// A key whose release failed during the outage stays held for its lease: known
			// runtime defect, see faults_pending_test.go.
			stuck = append(stuck, sh.key)
		default:
			t.Errorf("%s got %d during the storm, and its retry after the restart %d %s, want 201", sh.key, sh.resp.status, again.status, bytes.TrimSpace(again.body))
		}
	}
	if len(stuck) > 0 {
		t.Logf("%d keys still held after the restart (their release failed during the outage)", len(stuck))
	}
	r.e.wantLedgerMatchesKeys()
}

// retryWhileInProgress retries key as a client obeying 409 in-progress does, while the answer is
// in-progress: a release that failed during the outage is retried by the store in the background,
// so right after the restart the key may still be held for a moment. It must be given back well
// within releaseBound, far short of the 60 s lease a lost release would hold it for.
func (r *restartRun) retryWhileInProgress(t *testing.T, key string, resp response) response {
	t.Helper()
	deadline := time.Now().Add(releaseBound)
	for resp.status == http.StatusConflict && bytes.Contains(resp.body, []byte(`"code":"in-progress"`)) {
		if time.Now().After(deadline) {
			t.Errorf("%s: still 409 in-progress %s after the restart: its release was not retried, so the key is held until its lease ends", key, releaseBound)
			return resp
		}
		time.Sleep(20 * time.Millisecond)
		resp = r.e.send(create("acme", key, body19900))
	}
	return resp
}

// releaseBound is how long after the restart a key whose release failed may still be held.
const releaseBound = 10 * time.Second

// TestFaultDatabaseRestartUnderStorm: while requests pour in, the database is stopped and
// started again. During the outage every request is answered 503 store-unavailable, none hangs,
// every payment created before or after replays afterwards, and no key has two ledger rows.
func TestFaultDatabaseRestartUnderStorm(t *testing.T) {
	t.Parallel()
	stormAcrossRestart(t).check(t, false)
}

// TestFaultHandlerPanicIs500Problem: a handler that panics is answered like one that
// returns an error, with the runtime's 500 problem; the transaction is rolled back, the key
// released, and the server goes on serving.
func TestFaultHandlerPanicIs500Problem(t *testing.T) {
	t.Parallel()
	e, tr := newFaultEnv(t, 4, nil)
	fired := tr.arm(atLedgerInsert, func(context.Context, *pgx.Conn) { panic("simulated handler bug") })
	const tenant, key = "acme", "panics"
	resp, err := e.do(e.newRequest(create(tenant, key, body19900)))
	select {
	case <-fired:
	default:
		t.Fatal("the handler's ledger insert never ran: the panic was never injected")
	}
	if err != nil {
		t.Fatalf("panicking handler: no answer (%v), want a 500 problem", err)
	}
	wantProblem(t, "panicking handler", resp, http.StatusInternalServerError, "internal")
	e.waitReleased(tenant, key)
	e.wantFreshRetry(tenant, key)
}

// atRelease is the runtime's token-guarded DELETE that gives a key back.
var atRelease = point{"the release", func(sql string) bool {
	return strings.Contains(sql, "DELETE FROM ") && strings.Contains(sql, "owner_token")
}}
