package payments

// End-to-end tests: the real handler stack (tenant check, oapi-codegen's router and strict server,
// idemgen's generated adapter, the runtime, the handlers) behind a real HTTP server, on a real
// PostgreSQL schema of each test's own.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

type env struct {
	t      *testing.T
	url    string
	client *http.Client
	schema *idemtest.Schema
}

// newEnv serves the example on a schema of its own; each option changes the store's Config.
func newEnv(t *testing.T, options ...func(*idem.Config)) *env {
	t.Helper()
	schema := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 16})
	ctx := context.Background()
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	cfg := schema.Config()
	for _, o := range options {
		o(cfg)
	}
	h, store, err := newService(schema.Pool, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close) // after the server's close: no background log outlives the test
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := srv.Client()
	// Enough idle connections that 50 simultaneous requests do not queue behind each other.
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	return &env{t: t, url: srv.URL, client: client, schema: schema}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

type request struct {
	method, path, body string
	tenant, key        string // "" leaves the header out
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (e *env) newRequest(r request) *http.Request {
	e.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(r.method, e.url+r.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.tenant != "" {
		req.Header.Set("X-Tenant-ID", r.tenant)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	return req
}

// do may run on any goroutine: it returns errors instead of failing the test.
func (e *env) do(req *http.Request) (response, error) {
	resp, err := e.client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}

func (e *env) send(r request) response {
	e.t.Helper()
	resp, err := e.do(e.newRequest(r))
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return resp
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.schema.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// events counts the ledger rows (payment_events) of kind written under key: how many times a
// handler acted on that key. Exactly-once means this is 1 however many duplicates arrived.
func (e *env) events(kind, key string) int {
	e.t.Helper()
	return e.count("SELECT count(*) FROM payment_events WHERE kind = $1 AND idempotency_key = $2", kind, key)
}

func (e *env) keyRows() int {
	return e.count("SELECT count(*) FROM " + pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize())
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

// wantProblem checks that resp is an RFC 9457 problem with status and code, answered like every
// problem of the runtime and the example: application/problem+json, Cache-Control: no-store.
func wantProblem(t *testing.T, what string, resp response, status int, code string) problemBody {
	t.Helper()
	if resp.status != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, resp.status, status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q, want application/problem+json", what, ct)
	}
	if cc := resp.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("%s: Cache-Control %q, want no-store (a problem must not be cached)", what, cc)
	}
	var p problemBody
	if err := json.Unmarshal(resp.body, &p); err != nil {
		t.Fatalf("%s: problem body %q: %v", what, resp.body, err)
	}
	if p.Code != code || p.Status != status || p.Title == "" || p.Type == "" {
		t.Errorf("%s: problem %+v, want code %q, status %d, a title and a type", what, p, code, status)
	}
	return p
}

type paymentBody struct {
	PaymentID           string     `json:"payment_id"`
	Status              string     `json:"status"`
	AmountMinor         int64      `json:"amount_minor"`
	Currency            string     `json:"currency"`
	AmountRefundedMinor int64      `json:"amount_refunded_minor"`
	CapturedAt          *time.Time `json:"captured_at"`
}

type refundBody struct {
	RefundID    string `json:"refund_id"`
	PaymentID   string `json:"payment_id"`
	AmountMinor int64  `json:"amount_minor"`
	Status      string `json:"status"`
}

func decode[T any](t *testing.T, what string, resp response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(resp.body, &v); err != nil {
		t.Fatalf("%s: body %q: %v", what, resp.body, err)
	}
	return v
}

const body19900 = `{"amount_minor": 19900, "currency": "RUB"}`

func create(tenant, key, body string) request {
	return request{method: "POST", path: "/v1/payments", body: body, tenant: tenant, key: key}
}

// createPayment creates a payment and returns its id.
func (e *env) createPayment(tenant, key string) string {
	e.t.Helper()
	resp := e.send(create(tenant, key, body19900))
	if resp.status != http.StatusCreated || resp.replayed() {
		e.t.Fatalf("create payment: status %d, replayed %v, want a fresh 201; body %s", resp.status, resp.replayed(), resp.body)
	}
	return decode[paymentBody](e.t, "create payment", resp).PaymentID
}

// burst sends n copies of r at the same instant and returns the answers in order.
func (e *env) burst(n int, r request) []response {
	e.t.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = e.newRequest(r)
	}
	resps := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			resps[i], errs[i] = e.do(reqs[i])
		})
	}
	close(start) // the barrier: all n leave at the same instant
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.t.Fatalf("%s %s ×%d: %v", r.method, r.path, n, err)
	}
	return resps
}

// executedOnce checks the answers to a burst of identical requests: exactly one was executed
// (status want, not a replay); every other one got that outcome replayed (want, with
// Idempotent-Replayed: true) or 409 in-progress with Retry-After. It reports with t.Errorf, so
// the caller goes on to count rows and events, and returns the executed answer, or nil.
func executedOnce(t *testing.T, resps []response, want int) *response {
	t.Helper()
	var (
		first                      *response
		fresh, replays, inProgress int
		unexpected                 []string
	)
	for i, resp := range resps {
		switch {
		case resp.status == want && !resp.replayed():
			fresh++
			if first == nil {
				first = &resps[i]
			}
		case resp.status == want:
			replays++
		case resp.status == http.StatusConflict && bytes.Contains(resp.body, []byte(`"code":"in-progress"`)):
			wantProblem(t, "concurrent duplicate", resp, http.StatusConflict, "in-progress")
			if ra, err := strconv.Atoi(resp.header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("in-progress answer: Retry-After %q, want whole seconds ≥ 1", resp.header.Get("Retry-After"))
			}
			inProgress++
		default:
			unexpected = append(unexpected, fmt.Sprintf("request %d: %d %s", i, resp.status, bytes.TrimSpace(resp.body)))
		}
	}
	t.Logf("%d executed, %d replayed, %d in progress, %d other", fresh, replays, inProgress, len(unexpected))
	if len(unexpected) > 0 {
		t.Errorf("%d of %d answers are neither %d nor 409 in-progress (first ones: %q)", len(unexpected), len(resps), want, unexpected[:min(3, len(unexpected))])
	}
	if fresh != 1 {
		t.Errorf("%d of %d identical requests were executed (status %d without Idempotent-Replayed), want exactly 1", fresh, len(resps), want)
	}
	return first
}

// TestConcurrentIdenticalPostsCreateOnePayment is the double click, 50 times over: one execution,
// one payment and one authorization in the ledger. The ledger has no unique key, so a second
// execution would show there even where the payment's primary key refuses a second row.
func TestConcurrentIdenticalPostsCreateOnePayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const key = "double-click-1"
	first := executedOnce(t, e.burst(50, create("acme", key, body19900)), http.StatusCreated)
	if got := e.count("SELECT count(*) FROM payments"); got != 1 {
		t.Errorf("%d rows in payments after 50 identical requests, want 1", got)
	}
	if got := e.events("authorized", key); got != 1 {
		t.Errorf("%d authorized events in the ledger for key %s after 50 identical requests, want 1: the handler ran %[1]d times", got, key)
	}
	if first == nil {
		t.FailNow()
	}
	if got := e.count("SELECT count(*) FROM payment_events"); got != 1 {
		t.Errorf("%d events in the ledger, want 1", got)
	}

	// A retry once everything is done replays the first answer, Location included.
	retry := e.send(create("acme", key, body19900))
	if retry.status != http.StatusCreated || !retry.replayed() {
		t.Fatalf("retry after completion: status %d, Idempotent-Replayed %q; want a replayed 201",
			retry.status, retry.header.Get("Idempotent-Replayed"))
	}
	if !bytes.Equal(retry.body, first.body) {
		t.Errorf("retry body\n%s\nwant byte for byte\n%s", retry.body, first.body)
	}
	if got, want := retry.header.Get("Location"), first.header.Get("Location"); got != want || want == "" {
		t.Errorf("retry Location %q, want %q (non-empty)", got, want)
	}
	if got := e.count("SELECT count(*) FROM payments"); got != 1 {
		t.Errorf("%d rows in payments after the retry, want 1", got)
	}
	if got := e.events("authorized", key); got != 1 {
		t.Errorf("%d authorized events after the retry, want 1", got)
	}
}

func TestConcurrentIdenticalCapturesCaptureOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createPayment("acme", "k-pay")
	const key = "k-capture-burst"
	resps := e.burst(50, request{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: key})
	first := executedOnce(t, resps, http.StatusOK)
	if got := e.events("captured", key); got != 1 {
		t.Errorf("%d captured events in the ledger for key %s after 50 identical captures, want 1", got, key)
	}
	if first == nil {
		t.FailNow()
	}
	p := decode[paymentBody](t, "capture", *first)
	for i, resp := range resps {
		// storage: reference, so replays reload the payment: the same payment, captured once.
		if resp.status == http.StatusOK && resp.replayed() {
			if q := decode[paymentBody](t, "capture replay", resp); q.PaymentID != id || q.Status != "captured" || !q.CapturedAt.Equal(*p.CapturedAt) {
				t.Errorf("request %d: replayed %+v, want payment %s captured at %v", i, q, id, p.CapturedAt)
			}
		}
	}
}

func TestConcurrentIdenticalRefundsRefundOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createPayment("acme", "k-pay")
	if resp := e.send(request{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: "k-capture"}); resp.status != http.StatusOK {
		t.Fatalf("capture: status %d: %s", resp.status, resp.body)
	}
	const key = "k-refund-burst"
	resps := e.burst(50, request{method: "POST", path: "/v1/payments/" + id + "/refunds", tenant: "acme", key: key, body: `{"amount_minor": 5000}`})
	first := executedOnce(t, resps, http.StatusCreated)
	if got := e.events("refunded", key); got != 1 {
		t.Errorf("%d refunded events in the ledger for key %s after 50 identical refunds, want 1", got, key)
	}
	if got := e.count("SELECT count(*) FROM refunds"); got != 1 {
		t.Errorf("%d refunds after 50 identical requests, want 1", got)
	}
	pay := decode[paymentBody](t, "get", e.send(request{method: "GET", path: "/v1/payments/" + id, tenant: "acme"}))
	if pay.AmountRefundedMinor != 5000 {
		t.Errorf("amount_refunded_minor %d after 50 identical refunds of 5000, want 5000", pay.AmountRefundedMinor)
	}
	if first == nil {
		t.FailNow()
	}
	r := decode[refundBody](t, "refund", *first)
	for i, resp := range resps {
		// storage: marker, so replays are recomputed: the same refund.
		if resp.status == http.StatusCreated && resp.replayed() {
			if q := decode[refundBody](t, "refund replay", resp); q != r {
				t.Errorf("request %d: replayed %+v, want %+v", i, q, r)
			}
		}
	}
}

func TestPaymentIDDerivesFromTenantAndKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createPayment("acme", "k-1")
	if want := derivedID("pay_", "acme", "k-1"); id != want {
		t.Errorf("payment_id %q, want %q", id, want)
	}
	// The same key under another tenant is another payment: keys are scoped by tenant.
	other := e.createPayment("globex", "k-1")
	if other == id {
		t.Errorf("two tenants with one key got one payment id %q", id)
	}
	got := e.send(request{method: "GET", path: "/v1/payments/" + id, tenant: "acme"})
	p := decode[paymentBody](t, "get payment", got)
	if got.status != http.StatusOK || p.PaymentID != id || p.Status != "authorized" || p.AmountMinor != 19900 || p.Currency != "RUB" {
		t.Errorf("GET: status %d, payment %+v", got.status, p)
	}
	// Tenants see only their own payments.
	wantProblem(t, "GET another tenant's payment",
		e.send(request{method: "GET", path: "/v1/payments/" + id, tenant: "globex"}), http.StatusNotFound, "not-found")
}

func TestSameKeyOtherBodyIs422(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createPayment("acme", "k-reused")
	resp := e.send(create("acme", "k-reused", `{"amount_minor": 50000, "currency": "RUB"}`))
	wantProblem(t, "same key, other body", resp, http.StatusUnprocessableEntity, "key-reused")
	if resp.replayed() {
		t.Error("a key-reused problem is marked Idempotent-Replayed")
	}
	// JSON key order and whitespace are not a different request.
	same := e.send(create("acme", "k-reused", `{"currency":"RUB","amount_minor":19900}`))
	if same.status != http.StatusCreated || !same.replayed() {
		t.Errorf("same body, other key order: status %d, replayed %v; want a replayed 201", same.status, same.replayed())
	}
	if got := e.count("SELECT count(*) FROM payments"); got != 1 {
		t.Errorf("%d payments, want 1", got)
	}
}

func TestMissingKeyIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantProblem(t, "no key", e.send(create("acme", "", body19900)), http.StatusBadRequest, "key-missing")
	if got := e.count("SELECT count(*) FROM payments"); got != 0 {
		t.Errorf("%d payments after a request without a key, want 0", got)
	}
}

func TestMissingTenantIs401AndClaimsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantProblem(t, "no tenant", e.send(create("", "k-anon", body19900)), http.StatusUnauthorized, "unauthenticated")
	if got := e.keyRows(); got != 0 {
		t.Errorf("%d rows in the key table after an unauthenticated request, want 0", got)
	}
	if got := e.count("SELECT count(*) FROM payments"); got != 0 {
		t.Errorf("%d payments, want 0", got)
	}
	// The key is still free for the authenticated request.
	e.createPayment("acme", "k-anon")
}

func TestInvalidRequestBindsNoKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wantProblem(t, "bad currency", e.send(create("acme", "k-bad", `{"amount_minor": 100, "currency": "rub"}`)),
		http.StatusBadRequest, "request-invalid")
	wantProblem(t, "zero amount", e.send(create("acme", "k-bad", `{"amount_minor": 0, "currency": "RUB"}`)),
		http.StatusBadRequest, "request-invalid")
	if got := e.keyRows(); got != 0 {
		t.Errorf("%d rows in the key table after invalid requests, want 0", got)
	}
	e.createPayment("acme", "k-bad")
}

func TestHandlerErrorReleasesKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	failing := e.send(create("acme", "k-fail", `{"amount_minor": 19900, "currency": "RUB", "simulate_failure": true}`))
	wantProblem(t, "handler error", failing, http.StatusInternalServerError, "internal")
	if got := e.count("SELECT count(*) FROM payments"); got != 0 {
		t.Errorf("%d payments after the handler failed, want 0 (the insert must roll back)", got)
	}
	if got := e.keyRows(); got != 0 {
		t.Errorf("%d rows in the key table after the handler failed, want 0 (the key must be released)", got)
	}
	if got := e.events("authorized", "k-fail"); got != 0 {
		t.Errorf("%d authorized events after the handler failed, want 0 (the ledger row must roll back with the payment)", got)
	}
	// The retry (without the failure switch, which is excluded from the fingerprint) runs anew.
	retry := e.send(create("acme", "k-fail", body19900))
	if retry.status != http.StatusCreated || retry.replayed() {
		t.Fatalf("retry after a failure: status %d, replayed %v, want a fresh 201; body %s", retry.status, retry.replayed(), retry.body)
	}
	if got := e.count("SELECT count(*) FROM payments"); got != 1 {
		t.Errorf("%d payments after the retry, want 1", got)
	}
	if got := e.events("authorized", "k-fail"); got != 1 {
		t.Errorf("%d authorized events after the retry, want 1", got)
	}
}

func TestCaptureReplayShowsCurrentState(t *testing.T) {
	t.Parallel()
	cacheOnAndOff(t, func(t *testing.T, cache func(*idem.Config)) {
		e := newEnv(t, cache)
		id := e.createPayment("acme", "k-pay")
		capture := request{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: "k-capture"}

		first := e.send(capture)
		p := decode[paymentBody](t, "capture", first)
		if first.status != http.StatusOK || first.replayed() || p.Status != "captured" || p.CapturedAt == nil || p.AmountRefundedMinor != 0 {
			t.Fatalf("capture: status %d, replayed %v, payment %+v", first.status, first.replayed(), p)
		}

		// The payment changes after the capture; the replay must show the change.
		refund := e.send(request{method: "POST", path: "/v1/payments/" + id + "/refunds", tenant: "acme", key: "k-refund", body: `{"amount_minor": 5000}`})
		if refund.status != http.StatusCreated {
			t.Fatalf("refund: status %d: %s", refund.status, refund.body)
		}
		again := e.send(capture)
		q := decode[paymentBody](t, "capture replay", again)
		if again.status != http.StatusOK || !again.replayed() {
			t.Fatalf("capture replay: status %d, Idempotent-Replayed %q; want a replayed 200", again.status, again.header.Get("Idempotent-Replayed"))
		}
		if q.AmountRefundedMinor != 5000 || q.Status != "captured" || q.PaymentID != id {
			t.Errorf("capture replay shows %+v; want the current state (amount_refunded_minor 5000)", q)
		}
		if !p.CapturedAt.Equal(*q.CapturedAt) {
			t.Errorf("capture replay captured_at %v, want %v: the capture ran again", q.CapturedAt, p.CapturedAt)
		}
		if got := e.events("captured", "k-capture"); got != 1 {
			t.Errorf("%d captured events after a capture and its replay, want 1", got)
		}

		// Another key is another capture attempt, and the handler refuses it; 409 is not stored.
		wantProblem(t, "second capture with a new key",
			e.send(request{method: "POST", path: capture.path, tenant: "acme", key: "k-capture-2"}), http.StatusConflict, "not-capturable")
		if got := e.count("SELECT count(*) FROM "+pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()+" WHERE key = $1", "k-capture-2"); got != 0 {
			t.Errorf("the refused capture left %d key rows; persist: [2xx] should release it", got)
		}
		if got := e.events("captured", "k-capture-2"); got != 0 {
			t.Errorf("the refused capture left %d captured events, want 0", got)
		}
	})
}

func TestRefundReplayRecomputes(t *testing.T) {
	t.Parallel()
	cacheOnAndOff(t, func(t *testing.T, cache func(*idem.Config)) {
		e := newEnv(t, cache)
		id := e.createPayment("acme", "k-pay")
		if resp := e.send(request{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: "k-capture"}); resp.status != http.StatusOK {
			t.Fatalf("capture: status %d: %s", resp.status, resp.body)
		}
		refund := request{method: "POST", path: "/v1/payments/" + id + "/refunds", tenant: "acme", key: "k-refund", body: `{"amount_minor": 19900}`}
		first := e.send(refund)
		r := decode[refundBody](t, "refund", first)
		if first.status != http.StatusCreated || first.replayed() || r.Status != "pending" || r.AmountMinor != 19900 || r.PaymentID != id {
			t.Fatalf("refund: status %d, replayed %v, refund %+v", first.status, first.replayed(), r)
		}

		// The processor settles the refund; a marker stores no body, so the replay must recompute.
		if _, err := e.schema.Pool.Exec(context.Background(), `UPDATE refunds SET status = 'succeeded' WHERE refund_id = $1`, r.RefundID); err != nil {
			t.Fatal(err)
		}
		again := e.send(refund)
		q := decode[refundBody](t, "refund replay", again)
		if again.status != http.StatusCreated || !again.replayed() {
			t.Fatalf("refund replay: status %d, Idempotent-Replayed %q; want a replayed 201", again.status, again.header.Get("Idempotent-Replayed"))
		}
		if q.RefundID != r.RefundID || q.Status != "succeeded" || q.AmountMinor != 19900 {
			t.Errorf("refund replay %+v; want refund %s recomputed with status succeeded", q, r.RefundID)
		}
		if got := e.count("SELECT count(*) FROM refunds"); got != 1 {
			t.Errorf("%d refunds, want 1", got)
		}
		if got := e.events("refunded", "k-refund"); got != 1 {
			t.Errorf("%d refunded events after a refund and its replay, want 1", got)
		}
		pay := decode[paymentBody](t, "get", e.send(request{method: "GET", path: "/v1/payments/" + id, tenant: "acme"}))
		if pay.AmountRefundedMinor != 19900 || pay.Status != "refunded" {
			t.Errorf("payment after one full refund and its replay: %+v; want refunded 19900 once", pay)
		}
		// The same key with another amount is another request.
		wantProblem(t, "refund key reused", e.send(request{method: refund.method, path: refund.path, tenant: "acme", key: "k-refund", body: `{"amount_minor": 100}`}),
			http.StatusUnprocessableEntity, "key-reused")
	})
}

// TestDuplicateWhileInFlightIs409 holds the first request inside its handler deterministically:
// the test inserts the payment row the handler is about to insert, in a transaction it keeps
// open, so the handler's INSERT waits on the row lock while its key is claimed.
func TestDuplicateWhileInFlightIs409(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	blocker, err := e.schema.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `INSERT INTO payments (tenant_id, payment_id, status, amount_minor, currency)
		VALUES ('acme', $1, 'authorized', 19900, 'RUB')`, derivedID("pay_", "acme", "k-slow")); err != nil {
		t.Fatal(err)
	}

	firstDone := make(chan response, 1)
	go func() {
		resp, err := e.do(e.newRequest(create("acme", "k-slow", body19900)))
		if err != nil {
			t.Errorf("first request: %v", err)
		}
		firstDone <- resp
	}()
	deadline := time.Now().Add(10 * time.Second)
	for e.keyRows() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first request did not claim its key within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	dup := e.send(create("acme", "k-slow", body19900))
	wantProblem(t, "duplicate while in flight", dup, http.StatusConflict, "in-progress")
	if ra, err := strconv.Atoi(dup.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want the seconds left on the 60s lease", dup.header.Get("Retry-After"))
	}
	// The fingerprint is compared first, also while the key is in flight.
	wantProblem(t, "other body while in flight", e.send(create("acme", "k-slow", `{"amount_minor": 1, "currency": "RUB"}`)),
		http.StatusUnprocessableEntity, "key-reused")

	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-firstDone
	if first.status != http.StatusCreated || first.replayed() {
		t.Fatalf("first request: status %d, replayed %v, want a fresh 201; body %s", first.status, first.replayed(), first.body)
	}
	if retry := e.send(create("acme", "k-slow", body19900)); !retry.replayed() || !bytes.Equal(retry.body, first.body) {
		t.Errorf("retry once the first finished: status %d, replayed %v; want the first answer replayed", retry.status, retry.replayed())
	}
	if got := e.events("authorized", "k-slow"); got != 1 {
		t.Errorf("%d authorized events, want 1", got)
	}
}

// TestKeyReusedAfterExpiry covers a key used again after its record expired and was purged: the
// runtime lets the handler run, which finds the payment the key already made and refuses the key
// (422 key-reused, pointing at the payment) for the same request as for another one. It answers
// no success that was not an execution or a replay, and moves no money. Deleting the key rows
// stands in for expiry and purge.
func TestKeyReusedAfterExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createPayment("acme", "k-old")
	for _, body := range []string{body19900, `{"amount_minor": 1, "currency": "RUB"}`} {
		e.purgeKeys()
		p := wantProblem(t, "after expiry: "+body, e.send(create("acme", "k-old", body)), http.StatusUnprocessableEntity, "key-reused")
		if want := idemhttp.ProblemTypePrefix + idemhttp.CodeKeyReused; p.Type != want {
			t.Errorf("after expiry: type %q, want the runtime's %q", p.Type, want)
		}
		if want := idemhttp.ProblemTitle(idemhttp.CodeKeyReused); p.Title != want {
			t.Errorf("after expiry: title %q, want the runtime's %q for the same type", p.Title, want)
		}
		if !strings.Contains(p.Detail, "/v1/payments/"+id) {
			t.Errorf("after expiry: detail %q does not say where the key's payment is (/v1/payments/%s)", p.Detail, id)
		}
	}
	if got := e.count("SELECT count(*) FROM payments"); got != 1 {
		t.Errorf("%d payments, want 1", got)
	}
	if got := e.events("authorized", "k-old"); got != 1 {
		t.Errorf("%d authorized events, want 1: a key reused after expiry authorised again", got)
	}
}

// purgeKeys deletes every idempotency record, standing in for their expiry and purge.
func (e *env) purgeKeys() {
	e.t.Helper()
	if _, err := e.schema.Pool.Exec(context.Background(), "DELETE FROM "+pgx.Identifier{e.schema.Name, e.schema.Table}.Sanitize()); err != nil {
		e.t.Fatal(err)
	}
}

// TestRefundKeyReusedAfterExpiry is the same for refunds, whose ids derive from the key too.
func TestRefundKeyReusedAfterExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.createPayment("acme", "k-pay")
	if resp := e.send(request{method: "POST", path: "/v1/payments/" + id + "/capture", tenant: "acme", key: "k-capture"}); resp.status != http.StatusOK {
		t.Fatalf("capture: status %d: %s", resp.status, resp.body)
	}
	refund := request{method: "POST", path: "/v1/payments/" + id + "/refunds", tenant: "acme", key: "k-refund", body: `{"amount_minor": 5000}`}
	if first := e.send(refund); first.status != http.StatusCreated {
		t.Fatalf("refund: status %d: %s", first.status, first.body)
	}
	e.purgeKeys()
	p := wantProblem(t, "same refund after expiry", e.send(refund), http.StatusUnprocessableEntity, "key-reused")
	if !strings.Contains(p.Detail, "/v1/payments/"+id) {
		t.Errorf("after expiry: detail %q does not say which payment the key refunded (/v1/payments/%s)", p.Detail, id)
	}
	if got := e.events("refunded", "k-refund"); got != 1 {
		t.Errorf("%d refunded events, want 1", got)
	}
	if pay := decode[paymentBody](t, "get", e.send(request{method: "GET", path: "/v1/payments/" + id, tenant: "acme"})); pay.AmountRefundedMinor != 5000 {
		t.Errorf("amount_refunded_minor %d, want 5000 refunded once", pay.AmountRefundedMinor)
	}
}

// TestExampleProblems covers the problems the example answers itself (the runtime's are covered
// where they arise): each is RFC 9457 application/problem+json with Cache-Control: no-store (see
// wantProblem) and a type under the example's own prefix.
func TestExampleProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	authorized := e.createPayment("acme", "k-authorized")
	captured := e.createPayment("acme", "k-captured")
	if resp := e.send(request{method: "POST", path: "/v1/payments/" + captured + "/capture", tenant: "acme", key: "k-capture"}); resp.status != http.StatusOK {
		t.Fatalf("capture: status %d: %s", resp.status, resp.body)
	}
	for _, c := range []struct {
		what   string
		req    request
		status int
		code   string
	}{
		{"GET an unknown payment", request{method: "GET", path: "/v1/payments/pay_unknown", tenant: "acme"}, http.StatusNotFound, "not-found"},
		{"capture an unknown payment", request{method: "POST", path: "/v1/payments/pay_unknown/capture", tenant: "acme", key: "k-1"}, http.StatusNotFound, "not-found"},
		{"refund an unknown payment", request{method: "POST", path: "/v1/payments/pay_unknown/refunds", tenant: "acme", key: "k-2", body: `{"amount_minor": 1}`}, http.StatusNotFound, "not-found"},
		{"capture a captured payment", request{method: "POST", path: "/v1/payments/" + captured + "/capture", tenant: "acme", key: "k-3"}, http.StatusConflict, "not-capturable"},
		{"refund an authorized payment", request{method: "POST", path: "/v1/payments/" + authorized + "/refunds", tenant: "acme", key: "k-4", body: `{"amount_minor": 1}`}, http.StatusConflict, "not-refundable"},
		{"refund more than was paid", request{method: "POST", path: "/v1/payments/" + captured + "/refunds", tenant: "acme", key: "k-5", body: `{"amount_minor": 19901}`}, http.StatusConflict, "refund-too-large"},
		{"no tenant", request{method: "GET", path: "/v1/payments/" + authorized}, http.StatusUnauthorized, "unauthenticated"},
		{"invalid body", create("acme", "k-6", `{"amount_minor": 1, "currency": "rub"}`), http.StatusBadRequest, "request-invalid"},
		{"unparsable body", create("acme", "k-7", `{"amount_minor": "many"}`), http.StatusBadRequest, "request-invalid"},
	} {
		p := wantProblem(t, c.what, e.send(c.req), c.status, c.code)
		want := problemTypePrefix + c.code
		if c.code == idemhttp.CodeRequestInvalid { // the runtime's type: one type, one title
			want = idemhttp.ProblemTypePrefix + c.code
		}
		if p.Type != want {
			t.Errorf("%s: type %q, want %q", c.what, p.Type, want)
		}
		if p.Detail == "" {
			t.Errorf("%s: the problem has no detail", c.what)
		}
	}
	// None of them moved money: the two authorizations and the one capture are all there is.
	if got := e.count("SELECT count(*) FROM payment_events"); got != 3 {
		t.Errorf("%d events in the ledger, want 3", got)
	}
}
