// Package routertest is one table of HTTP cases run against the orders API of every router's
// golden package (testdata/router-*/api), end to end over real HTTP on real PostgreSQL, so that
// every router keeps the same contract: one execution per key, replays byte for byte, the same
// problems for the same refusals.
//
// Each golden package's test implements its generated IdempotentServerInterface on a Backend
// (the types differ per package; the business logic does not) and serves it with its framework
// on the listener Run gives it; Run does the rest.
package routertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/internal/goldenhttp"
)

// TenantHeader carries the caller's tenant. Each router's auth middleware answers 401 without
// it and otherwise stores it where that router's Config.Tenant reads it.
const TenantHeader = "X-Tenant"

// RegionHeader is the createOrder response header the policy's replayHeaders lists.
const RegionHeader = "X-Order-Region"

// Router is what one golden package's test gives Run.
type Router struct {
	Name string
	// Tenant is the store's Config.Tenant: it reads what the router's auth middleware stored.
	Tenant func(context.Context) (string, error)
	// Serve serves the package's API for b through store on ln (a listener on 127.0.0.1) until
	// the test ends; it returns when the server is ready to accept requests, and closes it at
	// t.Cleanup.
	Serve func(t *testing.T, b *Backend, store *idem.Store, ln net.Listener)
	// TenantInsideRouter says the auth middleware that stores the tenant runs inside the router,
	// after the body capture (gorilla's router middleware): a retry of a completed key cannot be
	// answered before the router there, since its tenant is not known yet, and goes down the
	// whole stack.
	TenantInsideRouter bool
}

// Order is the orders API's resource, as the Backend keeps it.
type Order struct {
	ID, Item, Status string
	Quantity         int
}

// Backend is the orders API's business logic on PostgreSQL, the same for every router.
type Backend struct {
	pool    *pgxpool.Pool
	tenant  func(context.Context) (string, error)
	failing sync.Map // tenant → true: CreateOrder fails after its insert
	runs    atomic.Int64
	// interactions numbers Sign's interaction ids.
	interactions atomic.Int64
}

// CreateOrder inserts an order in tx, in the request's tenant, named after the claimed key.
func (b *Backend) CreateOrder(ctx context.Context, tx pgx.Tx, item string, quantity int) (Order, error) {
	b.runs.Add(1)
	claim, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return Order{}, errors.New("routertest: the handler's context carries no claim")
	}
	tenant, err := b.tenant(ctx)
	if err != nil {
		return Order{}, fmt.Errorf("routertest: the handler's context has no tenant: %w", err)
	}
	o := Order{ID: tenant + "-" + claim.Key, Item: item, Quantity: quantity, Status: "created"}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, tenant, item, quantity, status) VALUES ($1, $2, $3, $4, $5)`,
		o.ID, tenant, o.Item, o.Quantity, o.Status); err != nil {
		return Order{}, err
	}
	if _, fail := b.failing.Load(tenant); fail {
		return Order{}, errors.New("routertest: CreateOrder fails on purpose")
	}
	return o, nil
}

// GetOrder loads an order; nil when there is none.
func (b *Backend) GetOrder(ctx context.Context, id string) (*Order, error) {
	return b.load(ctx, b.pool, id)
}

// ShipOrder marks an order shipped in tx; nil when there is none.
func (b *Backend) ShipOrder(ctx context.Context, tx pgx.Tx, id string) (*Order, error) {
	b.runs.Add(1)
	if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'shipped' WHERE id = $1`, id); err != nil {
		return nil, err
	}
	return b.load(ctx, tx, id)
}

// AddNote adds a note to an order in tx.
func (b *Backend) AddNote(ctx context.Context, tx pgx.Tx, orderID, text string) error {
	b.runs.Add(1)
	_, err := tx.Exec(ctx, `INSERT INTO notes (order_id, text) VALUES ($1, $2)`, orderID, text)
	return err
}

func (b *Backend) load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string) (*Order, error) {
	var o Order
	err := q.QueryRow(ctx, `SELECT id, item, quantity, status FROM orders WHERE id = $1`, id).Scan(&o.ID, &o.Item, &o.Quantity, &o.Status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &o, nil
}

// Run runs the table against r: one subtest per case, named after the router, so a failing case
// says which router failed.
func Run(t *testing.T, r Router) {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if _, err := sch.Pool.Exec(ctx, `
		CREATE TABLE orders (id text PRIMARY KEY, tenant text NOT NULL, item text NOT NULL, quantity int NOT NULL, status text NOT NULL);
		CREATE TABLE notes (order_id text NOT NULL, text text NOT NULL);
		`+paymentsTable); err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{}
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Tenant: r.Tenant, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	b := &Backend{pool: sch.Pool, tenant: r.Tenant}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Serve(t, b, store, ln)
	e := &env{router: r.Name, url: "http://" + ln.Addr().String(), b: b, logs: logs, tenantInside: r.TenantInsideRouter}
	e.waitReady(t)
	for _, c := range slices.Concat(cases, paymentCases, refundCases, routingCases, refusalCases, validationCases) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, e, &client{e: e, tenant: c.name})
		})
	}
}

type env struct {
	router string
	url    string
	b      *Backend
	logs   *logRecorder // what the store logged, debug records included
	// tenantInside: Router.TenantInsideRouter.
	tenantInside bool
}

// waitReady polls until the server answers, for frameworks whose Listen returns before they
// accept; it fails after a deadline naming the router.
func (e *env) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(e.url + "/v1/orders/none")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the server on %s did not answer within 10s: %v", e.router, e.url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orders counts tenant's orders.
func (e *env) orders(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	if err := e.b.pool.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) notes(t *testing.T, orderID string) int {
	t.Helper()
	var n int
	if err := e.b.pool.QueryRow(context.Background(), `SELECT count(*) FROM notes WHERE order_id = $1`, orderID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// client sends requests as one tenant (the case's name, so cases never share keys or rows).
type client struct {
	e      *env
	tenant string
}

type answer = goldenhttp.Answer

func (c *client) send(t *testing.T, method, path, body string, keys ...string) answer {
	t.Helper()
	h := http.Header{}
	if c.tenant != "" {
		h.Set(TenantHeader, c.tenant)
	}
	for _, k := range keys {
		h.Add("Idempotency-Key", k)
	}
	return goldenhttp.Send(t, method, c.e.url+path, "application/json", body, h)
}

// problem checks that a is the problem status/code, as every router must write it.
func (c *client) problem(t *testing.T, what string, a answer, status int, code string) {
	t.Helper()
	got := ""
	if a.Header.Get("Content-Type") == "application/problem+json" {
		got = goldenhttp.ProblemCode(t, a)
	}
	if a.Status != status || got != code || a.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("%s on %s: %d %q (Content-Type %q, Cache-Control %q) %s; want %d problem %s with Cache-Control: no-store",
			what, c.e.router, a.Status, got, a.Header.Get("Content-Type"), a.Header.Get("Cache-Control"), strings.TrimSpace(a.Body), status, code)
	}
}

func (c *client) create(t *testing.T, key, body string) answer {
	t.Helper()
	return c.send(t, http.MethodPost, "/v1/orders", body, key)
}

const orderBody = `{"item": "tea", "quantity": 2}`

type testCase struct {
	name string
	run  func(t *testing.T, e *env, c *client)
}

var cases = []testCase{
	{"concurrent-duplicates-execute-once", func(t *testing.T, e *env, c *client) {
		const n = 16
		answers := make([]answer, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				answers[i] = c.create(t, "same", orderBody)
			})
		}
		close(start)
		wg.Wait()
		fresh := 0
		for _, a := range answers {
			switch {
			case a.Status == 201 && !a.Replayed():
				fresh++
			case a.Status == 201, a.Status == 409:
			default:
				t.Errorf("%s: concurrent duplicate answered %s, want 201 (fresh or replayed) or 409 in-progress", e.router, a)
			}
		}
		if got := e.orders(t, c.tenant); got != 1 || fresh != 1 {
			t.Errorf("%s: %d orders and %d fresh answers after %d identical concurrent requests, want 1 and 1", e.router, got, fresh, n)
		}
	}},
	{"replay-byte-for-byte", func(t *testing.T, e *env, c *client) {
		first := c.create(t, "k", orderBody)
		if first.Status != 201 || first.Replayed() || first.Header.Get(RegionHeader) != "eu" {
			t.Fatalf("%s: first request: %s %v, want a fresh 201 with %s: eu", e.router, first, first.Header, RegionHeader)
		}
		// The same request with its members in another order and other spacing is the same request.
		again := c.create(t, "k", `{"quantity":2,"item":"tea"}`)
		if again.Status != first.Status || again.Body != first.Body || !again.Replayed() ||
			again.Header.Get("Content-Type") != first.Header.Get("Content-Type") ||
			again.Header.Get(RegionHeader) != "eu" || again.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: retry answered %s %v; want the first answer %q byte for byte with its Content-Type and %s, Idempotent-Replayed: true and Cache-Control: no-store",
				e.router, again, again.Header, first.Body, RegionHeader)
		}
		if n := e.orders(t, c.tenant); n != 1 {
			t.Errorf("%s: %d orders after a replay, want 1", e.router, n)
		}
	}},
	{"replay-before-the-router", func(t *testing.T, e *env, c *client) {
		// createOrder stores whole responses and its key is a string header: a retry of a
		// completed key is answered from the store before the router, the binding and the
		// strict server (the edge, idemhttp.EdgeRule), and the store reports it as an early
		// replay. A mismatch is not answered there: it goes down the stack and is refused there.
		first := c.create(t, "k", orderBody)
		if first.Status != 201 || first.Replayed() {
			t.Fatalf("%s: first request: %s", e.router, first)
		}
		c.problem(t, "same key, other body", c.create(t, "k", `{"item": "tea", "quantity": 3}`), 422, "key-reused")
		again := c.create(t, "k", orderBody)
		if again.Status != 201 || !again.Replayed() || again.Body != first.Body || again.Header.Get(RegionHeader) != "eu" {
			t.Fatalf("%s: retry answered %s %v, want the first answer %q with %s", e.router, again, again.Header, first.Body, RegionHeader)
		}
		// The key's hash as the store logs it: the scope is the tenant, then the operation, each
		// length-prefixed (idemhttp's scope string).
		hash := idem.KeyHash(fmt.Sprintf("%d:%s|9:operation=11:createOrder", len(c.tenant), c.tenant), "k")
		if !e.logs.has("idem: "+string(idem.EventKeyReused), hash, "") {
			t.Fatalf("%s: no key_reused record names key %s: the mismatch was not refused by the full stack, or the hash is not the store's", e.router, hash)
		}
		if e.tenantInside {
			if !e.logs.has("idem: "+string(idem.EventReplayed), hash, "") {
				t.Errorf("%s: the tenant is set inside the router, yet no replayed record of key %s comes from the full stack", e.router, hash)
			}
			return
		}
		if !e.logs.has("idem: "+string(idem.EventReplayed), hash, "true") {
			t.Errorf("%s: the retry of a completed key was not answered early (no replayed record with early=true for key %s): it went through the router and the binding", e.router, hash)
		}
		if e.logs.has("idem: "+string(idem.EventReplayed), hash, "") {
			t.Errorf("%s: a replayed record of key %s without early=true: a retry was served by the full stack", e.router, hash)
		}
	}},
	{"mismatch-422", func(t *testing.T, e *env, c *client) {
		if a := c.create(t, "k", orderBody); a.Status != 201 {
			t.Fatalf("%s: first request: %s", e.router, a)
		}
		c.problem(t, "same key, other body", c.create(t, "k", `{"item": "tea", "quantity": 3}`), 422, "key-reused")
	}},
	{"undeclared-member-changes-fingerprint", func(t *testing.T, e *env, c *client) {
		if a := c.create(t, "k", orderBody); a.Status != 201 {
			t.Fatalf("%s: first request: %s", e.router, a)
		}
		// oapi-codegen's decoder drops the member; the fingerprint covers the body as sent.
		c.problem(t, "same key, an undeclared member added", c.create(t, "k", `{"item": "tea", "quantity": 2, "gift": true}`), 422, "key-reused")
		if n := e.orders(t, c.tenant); n != 1 {
			t.Errorf("%s: %d orders, want 1", e.router, n)
		}
	}},
	{"missing-key-400", func(t *testing.T, e *env, c *client) {
		c.problem(t, "no key", c.send(t, http.MethodPost, "/v1/orders", orderBody), 400, "key-missing")
	}},
	{"empty-key-400", func(t *testing.T, e *env, c *client) {
		// An empty value is a key sent malformed, not a key left out.
		c.problem(t, "an empty key", c.create(t, "", orderBody), 400, "key-invalid")
		c.problem(t, "a key of blanks", c.create(t, "  ", orderBody), 400, "key-invalid")
		if n := e.orders(t, c.tenant); n != 0 {
			t.Errorf("%s: %d orders after empty keys, want 0", e.router, n)
		}
	}},
	{"malformed-key-400", func(t *testing.T, e *env, c *client) {
		c.problem(t, "a key over maxLength", c.create(t, strings.Repeat("k", 65), orderBody), 400, "key-invalid")
		c.problem(t, "two key headers", c.send(t, http.MethodPost, "/v1/orders", orderBody, "k1", "k2"), 400, "key-invalid")
		c.problem(t, "a key that is not the uuid addNote declares",
			c.send(t, http.MethodPost, "/v1/orders/x/notes", `{"text": "hi"}`, "not-a-uuid"), 400, "key-invalid")
		if n := e.orders(t, c.tenant); n != 0 {
			t.Errorf("%s: %d orders after refused keys, want 0", e.router, n)
		}
	}},
	{"missing-tenant-401", func(t *testing.T, e *env, c *client) {
		anon := &client{e: e}
		if a := anon.create(t, "k", orderBody); a.Status != 401 {
			t.Errorf("%s: no tenant: %s, want 401 from the auth middleware, before any claim", e.router, a)
		}
		// The key was not claimed: the same key with a tenant executes.
		if a := c.create(t, "k", orderBody); a.Status != 201 || a.Replayed() {
			t.Errorf("%s: after the 401, the key with a tenant: %s, want a fresh 201", e.router, a)
		}
	}},
	{"handler-error-releases-key", func(t *testing.T, e *env, c *client) {
		e.b.failing.Store(c.tenant, true)
		c.problem(t, "a failing handler", c.create(t, "k", orderBody), 500, "internal")
		if n := e.orders(t, c.tenant); n != 0 {
			t.Errorf("%s: %d orders after a failed handler, want 0 (rolled back)", e.router, n)
		}
		e.b.failing.Delete(c.tenant)
		if a := c.create(t, "k", orderBody); a.Status != 201 || a.Replayed() {
			t.Errorf("%s: retry after the failure: %s, want a fresh 201 (the key was released)", e.router, a)
		}
		if n := e.orders(t, c.tenant); n != 1 {
			t.Errorf("%s: %d orders after the retry, want 1", e.router, n)
		}
	}},
	{"reference-replay-reloads", func(t *testing.T, e *env, c *client) {
		if a := c.create(t, "o", orderBody); a.Status != 201 {
			t.Fatalf("%s: create: %s", e.router, a)
		}
		id := c.tenant + "-o"
		ship := "/v1/orders/" + id + "/ship"
		first := c.send(t, http.MethodPost, ship, "", "s")
		if first.Status != 200 || !strings.Contains(first.Body, `"status":"shipped"`) || first.Replayed() {
			t.Fatalf("%s: ship: %s, want a fresh 200 with status shipped", e.router, first)
		}
		if _, err := e.b.pool.Exec(context.Background(), `UPDATE orders SET status = 'delivered' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		again := c.send(t, http.MethodPost, ship, "", "s")
		if again.Status != 200 || !strings.Contains(again.Body, `"status":"delivered"`) || !again.Replayed() {
			t.Errorf("%s: reference replay: %s, want the order's current state (delivered), marked replayed", e.router, again)
		}
	}},
	{"marker-replay-recomputes", func(t *testing.T, e *env, c *client) {
		notes := "/v1/orders/" + c.tenant + "-n/notes"
		const key = "5f0c6f4e-1d3b-4c3e-9f59-2f1d7a1c0b11"
		first := c.send(t, http.MethodPost, notes, `{"text": "ring twice"}`, key)
		again := c.send(t, http.MethodPost, notes, `{"text": "ring twice"}`, key)
		if first.Status != 202 || first.Replayed() || again.Status != 202 || !again.Replayed() || again.Body != first.Body {
			t.Errorf("%s: marker: first %s, retry %s; want 202 twice, the retry marked replayed with the same body", e.router, first, again)
		}
		if n := e.notes(t, c.tenant+"-n"); n != 1 {
			t.Errorf("%s: %d notes, want 1", e.router, n)
		}
	}},
	{"oversized-body-413", func(t *testing.T, e *env, c *client) {
		big := `{"item": "` + strings.Repeat("t", 1<<20) + `", "quantity": 1}`
		c.problem(t, "a body over 1 MiB", c.create(t, "k", big), 413, "body-too-large")
		if n := e.orders(t, c.tenant); n != 0 {
			t.Errorf("%s: %d orders after a refused body, want 0", e.router, n)
		}
	}},
	{"trailing-garbage-400", func(t *testing.T, e *env, c *client) {
		c.problem(t, "data after the JSON value", c.create(t, "k", orderBody+"GARBAGE"), 400, "body-invalid")
		if a := c.create(t, "k", orderBody); a.Status != 201 || a.Replayed() {
			t.Errorf("%s: the key after a refused body: %s, want a fresh 201 (nothing was claimed)", e.router, a)
		}
	}},
}

// RunUnimplemented serves r's API with the generated UnimplementedIdempotentServer (r.Serve's
// backend is ignored by such a server) and checks that an idempotent operation and one that is
// not both answer the 501 not-implemented problem, instead of panicking into the router's
// recovery, and that nothing was claimed.
func RunUnimplemented(t *testing.T, r Router) {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Tenant: r.Tenant})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Serve(t, &Backend{pool: sch.Pool, tenant: r.Tenant}, store, ln)
	e := &env{router: r.Name, url: "http://" + ln.Addr().String()}
	e.waitReady(t)
	c := &client{e: e, tenant: "unimplemented"}
	c.problem(t, "an unimplemented idempotent operation", c.create(t, "k-unimplemented", orderBody), http.StatusNotImplemented, "not-implemented")
	c.problem(t, "an unimplemented operation that is not idempotent", c.send(t, http.MethodGet, "/v1/orders/o-1", ""), http.StatusNotImplemented, "not-implemented")
	var keys int
	if err := sch.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{sch.Name, "idempotency_keys"}.Sanitize()).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	if keys != 0 {
		t.Errorf("%s: %d keys kept after an unimplemented operation answered 501, want 0 (released)", r.Name, keys)
	}
}
