package payments

// The generated client (api.IdempotentClient) against the example server on real PostgreSQL,
// under faults: connections cut before the request reaches the server and after the server
// answered, backends of the server's pool terminated, the server restarted, and duplicates of
// one logical call in flight at once. Whatever happens, each logical call must end with the
// first execution's answer, and the ledger must hold exactly one authorisation per call.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// cutProxy forwards loopback TCP connections to the server, and cuts some of them: every
// cutEvery-th connection before anything reaches the server, the one after that once the server
// has started to answer (the request was handled: a generated server answers after its commit)
// but before any of the answer reaches the client. The client sends one request per connection
// (no keep-alive), so each cut is one lost attempt.
type cutProxy struct {
	ln       net.Listener
	target   atomic.Pointer[string]
	conns    atomic.Int64
	cutEvery int64

	cutBefore, cutAfter, refused atomic.Int64
	wg                           sync.WaitGroup
}

func newCutProxy(t *testing.T, cutEvery int64) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, cutEvery: cutEvery}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *cutProxy) point(addr string) { p.target.Store(&addr) }

func (p *cutProxy) handle(c net.Conn) {
	defer c.Close()
	// A connection that outlives any request's bound is a bug in the test, not a reason to hang.
	_ = c.SetDeadline(time.Now().Add(faultBound))
	n := p.conns.Add(1)
	if n%p.cutEvery == 0 {
		// The request's first bytes arrive and go nowhere.
		_, _ = c.Read(make([]byte, 512))
		p.cutBefore.Add(1)
		return
	}
	target := p.target.Load()
	if target == nil {
		p.refused.Add(1)
		return
	}
	s, err := net.DialTimeout("tcp", *target, 5*time.Second)
	if err != nil { // the server is down (restarting): the client sees the connection close
		p.refused.Add(1)
		return
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(faultBound))
	go func() {
		_, _ = io.Copy(s, c)
		if tc, ok := s.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	if n%p.cutEvery == 1 && n > 1 {
		first := make([]byte, 1)
		if _, err := io.ReadFull(s, first); err == nil {
			p.cutAfter.Add(1) // the answer started; the client gets none of it
		}
		return
	}
	_, _ = io.Copy(c, s)
}

// serverInstance is one run of the example server: its own pool, store and listener, as a
// process of its own would have.
type serverInstance struct {
	srv      *http.Server
	pool     *pgxpool.Pool
	store    *idem.Store
	addr     string
	inFlight sync.WaitGroup
	served   chan error
}

func startInstance(t *testing.T, schema *idemtest.Schema, app string) *serverInstance {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema.Name
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, store, err := newService(pool, schema.Config(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in := &serverInstance{pool: pool, store: store, addr: ln.Addr().String(), served: make(chan error, 1)}
	in.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.inFlight.Add(1)
		defer in.inFlight.Done()
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: faultBound}
	go func() { in.served <- in.srv.Serve(ln) }()
	return in
}

// kill ends the instance the hard way: every connection closed at once, mid-request or not
// (the handlers' contexts end, so their transactions roll back and their keys are released),
// then its store and pool, as when a process is stopped without a graceful shutdown.
func (in *serverInstance) kill(t *testing.T) {
	t.Helper()
	_ = in.srv.Close()
	done := make(chan struct{})
	go func() { in.inFlight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(faultBound):
		t.Errorf("the killed server's handlers did not end within %s", faultBound)
	}
	in.store.Close()
	in.pool.Close()
}

type clientCall struct {
	key      string
	status   int
	body     []byte
	id       string
	replayed bool
	attempts int
	elapsed  time.Duration
	err      error
}

// TestClientUnderFaults: N logical calls through the generated client, some of them sent three
// times at once with one key (a user's double click, a second worker), while the proxy cuts
// connections, backends are terminated and the server is restarted halfway. Every call must
// succeed with the first execution's answer, and the database must hold exactly N payments,
// each authorised once.
func TestClientUnderFaults(t *testing.T) {
	t.Parallel()
	const (
		logical    = 40
		dupEvery   = 5 // every 5th logical call is sent by 3 callers at once
		dupCallers = 3
		workers    = 8
		tenant     = "acme"
	)
	schema := idemtest.TestSchema(t, nil)
	if err := Migrate(context.Background(), schema.Pool); err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("idemgen-client-faults-%d", time.Now().UnixNano())
	proxy := newCutProxy(t, 6)
	var mu sync.Mutex
	current := startInstance(t, schema, app)
	proxy.point(current.addr)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if current != nil {
			current.kill(t)
		}
	})

	var retries atomic.Int64
	reasons := map[string]int{}
	var reasonsMu sync.Mutex
	client, err := api.NewIdempotentClient("http://"+proxy.ln.Addr().String(), &idemclient.Options{
		MaxAttempts: 40,
		// Beyond the spec's 60s lease, should a terminated backend orphan a claim.
		MaxElapsed:     90 * time.Second,
		BackoffBase:    20 * time.Millisecond,
		BackoffCap:     500 * time.Millisecond,
		AttemptTimeout: faultBound,
		HTTPClient:     &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		OnRetry: func(attempt int, reason string, wait time.Duration) {
			retries.Add(1)
			kind, _, _ := strings.Cut(reason, ":")
			reasonsMu.Lock()
			reasons[kind]++
			reasonsMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	admin, err := pgx.Connect(context.Background(), schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })

	// The faults besides the proxy's: backends terminated while calls run, and one restart
	// once half the logical calls are done.
	halfway := make(chan struct{}) // closed by the sender, once
	stopFaults := make(chan struct{})
	faultsDone := make(chan struct{})
	var killed, restarts atomic.Int64
	go func() {
		defer close(faultsDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		restart := halfway
		for {
			select {
			case <-stopFaults:
				return
			case <-restart:
				restart = nil // once
				{
					mu.Lock()
					current.kill(t)
					current = nil
					mu.Unlock()
					time.Sleep(300 * time.Millisecond) // down: the proxy's dials are refused
					next := startInstance(t, schema, app)
					mu.Lock()
					current = next
					mu.Unlock()
					proxy.point(next.addr)
					restarts.Add(1)
				}
			case <-tick.C:
				if killed.Load() >= 12 {
					continue
				}
				var n int
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := admin.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE application_name = $1 ORDER BY state <> 'idle' DESC, random() LIMIT 1) AS k`, app).Scan(&n)
				cancel()
				if err == nil {
					killed.Add(int64(n))
				}
			}
		}
	}()

	// Each logical call is sent by one caller with a key the client makes, or by three callers
	// at once with one key of the caller's (WithKey).
	type job struct {
		i   int
		key string
	}
	jobs := make(chan job)
	results := make(chan clientCall, logical*dupCallers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				results <- oneCall(client, tenant, j.key, j.i)
			}
		}()
	}
	var dupWG sync.WaitGroup
	for i := range logical {
		key := fmt.Sprintf("client-fault-%03d", i)
		if i%dupEvery == 0 {
			// Duplicates in flight: three callers with one key, at once, beside the workers.
			for range dupCallers {
				dupWG.Add(1)
				go func() {
					defer dupWG.Done()
					results <- oneCall(client, tenant, key, i)
				}()
			}
		} else {
			jobs <- job{i: i}
		}
		if i == logical/2 {
			close(halfway)
		}
	}
	close(jobs)
	wg.Wait()
	dupWG.Wait()
	close(stopFaults)
	<-faultsDone
	close(results)

	byKey := map[string][]clientCall{}
	calls, attempts, replays := 0, 0, 0
	var slowest clientCall
	for r := range results {
		calls++
		if r.elapsed > slowest.elapsed {
			slowest = r
		}
		attempts += r.attempts
		if r.replayed {
			replays++
		}
		byKey[r.key] = append(byKey[r.key], r)
		if r.err != nil || r.status != http.StatusCreated {
			t.Errorf("call with key %s: status %d, error %v after %d attempts; want the 201 (the server came back: no call may give up)", r.key, r.status, r.err, r.attempts)
		}
	}
	if len(byKey) != logical {
		t.Errorf("%d keys answered, want %d", len(byKey), logical)
	}

	// The first execution's answer is the one the server stored with the key.
	ctx := context.Background()
	stored := map[string][]byte{}
	rows, err := admin.Query(ctx, `SELECT key, body FROM `+pgx.Identifier{schema.Name, schema.Table}.Sanitize()+` WHERE tenant = $1 AND state = 'complete'`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var b []byte
		if err := rows.Scan(&k, &b); err != nil {
			t.Fatal(err)
		}
		stored[k] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key, rs := range byKey {
		for _, r := range rs {
			if r.err == nil && !bytes.Equal(r.body, stored[key]) {
				t.Errorf("key %s: a call returned %s, want the stored first answer %s", key, r.body, stored[key])
			}
		}
	}
	var payments, authorized, keysAuthorizedOnce int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema.Name, "payments"}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&payments); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, `SELECT count(*), count(DISTINCT idempotency_key) FROM `+pgx.Identifier{schema.Name, "payment_events"}.Sanitize()+
		` WHERE tenant_id = $1 AND kind = 'authorized'`, tenant).Scan(&authorized, &keysAuthorizedOnce); err != nil {
		t.Fatal(err)
	}
	if payments != logical || authorized != logical || keysAuthorizedOnce != logical {
		t.Errorf("%d payments, %d authorisations for %d keys; want exactly %d of each (one per logical call)", payments, authorized, keysAuthorizedOnce, logical)
	}
	if proxy.cutBefore.Load() == 0 || proxy.cutAfter.Load() == 0 || restarts.Load() != 1 {
		t.Errorf("faults injected: %d cut before, %d cut after, %d restarts; want some of each", proxy.cutBefore.Load(), proxy.cutAfter.Load(), restarts.Load())
	}
	reasonsMu.Lock()
	defer reasonsMu.Unlock()
	t.Logf("logical calls %d, calls %d (duplicates in flight %d), attempts %d (retries %d), payments %d, authorisations %d, replays %d; "+
		"faults: %d connections cut before the server, %d cut after it answered, %d refused while down, %d backends terminated, %d restart; retry reasons %v; slowest call %s (%d attempts)",
		logical, calls, calls-logical, attempts, retries.Load(), payments, authorized, replays,
		proxy.cutBefore.Load(), proxy.cutAfter.Load(), proxy.refused.Load(), killed.Load(), restarts.Load(), reasons, slowest.elapsed.Round(time.Millisecond), slowest.attempts)
}

// oneCall creates payment i through the generated client, with key ("" to let the client make
// one), bounded by two minutes.
func oneCall(client *api.IdempotentClient, tenant, key string, i int) clientCall {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	var res idemclient.Result
	opts := []idemclient.CallOption{idemclient.WithResult(&res)}
	if key != "" {
		opts = append(opts, idemclient.WithKey(key))
	}
	resp, err := client.CreatePaymentWithResponse(ctx, &api.CreatePaymentParams{XTenantID: tenant},
		api.CreatePaymentJSONRequestBody{AmountMinor: int64(1000 + i), Currency: "EUR"}, opts...)
	c := clientCall{key: res.Key, err: err, attempts: res.Attempts, replayed: res.Replayed, elapsed: time.Since(start)}
	if resp != nil {
		c.status, c.body = resp.StatusCode(), resp.Body
		if resp.JSON201 != nil {
			c.id = resp.JSON201.PaymentId
		}
	}
	if err == nil && c.id == "" {
		c.err = errors.New("the 201 carries no payment id")
	}
	return c
}
