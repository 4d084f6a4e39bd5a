package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/examples/orders-sqlc/db"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

type env struct {
	t      *testing.T
	url    string
	client *http.Client
	sch    *idemtest.Schema
}

// newEnv serves the example over HTTP on a schema of its own (a real PostgreSQL:
// TEST_DATABASE_URL).
func newEnv(t *testing.T) *env {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	h, store, err := setup(context.Background(), sch.Pool, sch.Config(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, client: srv.Client(), sch: sch}
}

type answer struct {
	status int
	header http.Header
	body   string
}

func (e *env) create(key, body string) (answer, error) {
	req, err := http.NewRequest(http.MethodPost, e.url+"/v1/orders", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

// orders counts the business rows through sqlc's own query.
func (e *env) orders() int64 {
	e.t.Helper()
	n, err := db.New(e.sch.Pool).CountOrders(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestDuplicateReplaysOneRow: the sqlc handler's insert and the stored response commit in one
// transaction, so a retry is the first answer replayed and the table holds one order.
func TestDuplicateReplaysOneRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, err := e.create("k-1", `{"item": "tea", "quantity": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first request: %d %v %s; want a fresh 201", first.status, first.header, first.body)
	}
	var o struct {
		ID       int64  `json:"id"`
		Item     string `json:"item"`
		Quantity int32  `json:"quantity"`
	}
	if err := json.Unmarshal([]byte(first.body), &o); err != nil || o.ID == 0 || o.Item != "tea" || o.Quantity != 2 {
		t.Fatalf("first body %s (%v); want the order sqlc's RETURNING gave", first.body, err)
	}
	again, err := e.create("k-1", `{"quantity": 2, "item": "tea"}`)
	if err != nil {
		t.Fatal(err)
	}
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body {
		t.Fatalf("retry: %d %v %s; want the first answer replayed", again.status, again.header, again.body)
	}
	if n := e.orders(); n != 1 {
		t.Fatalf("%d orders after a request and its retry; want 1", n)
	}
}

// TestConcurrentDuplicatesOneRow: identical requests at the same instant, one order.
func TestConcurrentDuplicatesOneRow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 12
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	answers := make([]answer, n)
	errs := make([]error, n)
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			answers[i], errs[i] = e.create("k-storm", `{"item": "tea", "quantity": 1}`)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	fresh := 0
	for i, a := range answers {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") == "":
			fresh++
		case a.status == http.StatusCreated, a.status == http.StatusConflict && strings.Contains(a.body, `"in-progress"`):
		default:
			t.Errorf("request %d: %d %s; want 201 or 409 in-progress", i, a.status, a.body)
		}
	}
	if fresh != 1 {
		t.Errorf("%d fresh executions of %d identical requests; want 1", fresh, n)
	}
	if got := e.orders(); got != 1 {
		t.Fatalf("%d orders; want 1", got)
	}
}

// TestFailedInsertReleasesTheKey: a statement sqlc runs that fails (quantity must be > 0) rolls
// back, the key is given back, and the client gets a problem, not PostgreSQL's text.
func TestFailedInsertReleasesTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, err := e.create("k-bad", `{"item": "tea", "quantity": 0}`)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusInternalServerError || a.header.Get("Content-Type") != "application/problem+json" || strings.Contains(a.body, "check constraint") {
		t.Fatalf("failed insert: %d %v %s; want a 500 problem without PostgreSQL's text", a.status, a.header, a.body)
	}
	if n := e.orders(); n != 0 {
		t.Fatalf("%d orders after a failed insert; want 0", n)
	}
	if ok, err := e.create("k-bad", `{"item": "tea", "quantity": 0}`); err != nil || ok.status != http.StatusInternalServerError || ok.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry of the failed insert: %+v, %v; want it run again (the key was released), not replayed", ok, err)
	}
}
