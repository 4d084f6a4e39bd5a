package payments

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The HTTP contract for every request a client can send: the whole body fingerprinted as sent,
// bounded sizes, and problems (never Go or SQL text) for everything the server refuses.

// A member the schema does not declare is part of what the client sent: the same key with it
// is a different request (422), not a replay of the first.
func TestUndeclaredMemberIsPartOfTheFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := e.send(create("acme", "k-note", `{"amount_minor": 100, "currency": "EUR"}`))
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	other := e.send(create("acme", "k-note", `{"amount_minor":100,"currency":"EUR","note":"totally different"}`))
	wantProblem(t, "same key, an undeclared member added", other, http.StatusUnprocessableEntity, "key-reused")
	// Key order and white space are not a difference.
	same := e.send(create("acme", "k-note", "{\n  \"currency\" : \"EUR\",\"amount_minor\":100}"))
	if same.status != http.StatusCreated || !same.replayed() || string(same.body) != string(first.body) {
		t.Fatalf("reordered body = %d replayed=%v %s; want the first 201 replayed", same.status, same.replayed(), same.body)
	}
	if n := e.events("authorized", "k-note"); n != 1 {
		t.Fatalf("%d ledger events for k-note; want 1", n)
	}
}

// A body that is not exactly one JSON value, or that repeats a member, is refused before any
// key is claimed: oapi-codegen's decoder would have read only its first value.
func TestMalformedJSONIsRefusedBeforeAnyClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, body := range []string{
		`{"amount_minor": 100, "currency": "EUR"}GARBAGE`,
		`{"amount_minor": 100, "currency": "EUR"}{"amount_minor": 5, "currency": "EUR"}`,
		`{"amount_minor": 100, "currency": "EUR", "amount_minor": 1}`,
	} {
		p := wantProblem(t, body, e.send(create("acme", fmt.Sprintf("k-bad-%d", i), body)), http.StatusBadRequest, "body-invalid")
		if strings.Contains(p.Detail, "Go value") || strings.Contains(p.Detail, "api.") {
			t.Errorf("%s: detail %q carries Go text", body, p.Detail)
		}
	}
	if n := e.keyRows(); n != 0 {
		t.Fatalf("%d key rows after malformed bodies; want 0 (refused before the claim)", n)
	}
}

// A body over the cap is answered 413 before the handler or the claim, whether it declares its
// length or streams it chunked; memory is bounded by the cap, not by what the client sends.
func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	big := `{"amount_minor": 100, "currency": "EUR", "pad": "` + strings.Repeat("x", 2<<20) + `"}`
	wantProblem(t, "a 2 MiB body", e.send(create("acme", "k-big", big)), http.StatusRequestEntityTooLarge, "body-too-large")

	req := e.newRequest(create("acme", "k-big-chunked", ""))
	req.Body = io.NopCloser(io.MultiReader(strings.NewReader(`{"pad":"`), infinite{}))
	req.ContentLength = -1 // chunked
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.do(req)
	if err != nil {
		// The server may close the connection once it has answered; what it answered counts.
		t.Logf("chunked upload: %v", err)
	} else {
		wantProblem(t, "an endless chunked body", resp, http.StatusRequestEntityTooLarge, "body-too-large")
	}
	if n := e.keyRows(); n != 0 {
		t.Fatalf("%d key rows after oversized bodies; want 0", n)
	}
}

// infinite reads as an endless run of x, with a bound on the whole test: the server must stop
// reading long before this much was sent.
type infinite struct{}

func (infinite) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// Every refusal is a problem: a body of the wrong JSON type, a repeated header parameter, an
// unknown path, a wrong method, a handler's failure. None carries Go text.
func TestEveryRefusalIsAProblem(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	raw := func(method, path, body string, header http.Header) response {
		t.Helper()
		req := e.newRequest(request{method: method, path: path, body: body})
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := e.do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, c := range []struct {
		what   string
		resp   response
		status int
		code   string
	}{
		{"an array body", raw("POST", "/v1/payments", `[1, 2]`, h("X-Tenant-ID", "acme", "Idempotency-Key", "k-arr")), 400, "request-invalid"},
		{"a string amount", raw("POST", "/v1/payments", `{"amount_minor": "many", "currency": "EUR"}`, h("X-Tenant-ID", "acme", "Idempotency-Key", "k-str")), 400, "request-invalid"},
		{"two tenant headers", raw("GET", "/v1/payments/pay_x", "", h("X-Tenant-ID", "acme", "X-Tenant-ID", "globex")), 400, "request-invalid"},
		{"two key headers", raw("POST", "/v1/payments", `{"amount_minor": 1, "currency": "EUR"}`, h("X-Tenant-ID", "acme", "Idempotency-Key", "a", "Idempotency-Key", "b")), 400, "key-invalid"},
		{"an unknown path", raw("GET", "/v1/nothing-here", "", h("X-Tenant-ID", "acme")), 404, "not-found"},
		{"a wrong method", raw("DELETE", "/v1/payments", "", h("X-Tenant-ID", "acme")), 405, "method-not-allowed"},
		{"a handler failure", raw("POST", "/v1/payments", `{"amount_minor": 1, "currency": "EUR", "simulate_failure": true}`, h("X-Tenant-ID", "acme", "Idempotency-Key", "k-fail")), 500, "internal"},
	} {
		p := wantProblem(t, c.what, c.resp, c.status, c.code)
		for _, leak := range []string{"Go value", "api.", "unmarshal", "Expected one value", "SQLSTATE", "pgx", "simulated processor failure"} {
			if strings.Contains(p.Detail, leak) || strings.Contains(p.Title, leak) {
				t.Errorf("%s: %q leaks %q", c.what, p.Detail, leak)
			}
		}
	}
}

// /healthz never prints the database URL or a dial error, even when the database is gone.
func TestHealthzLeaksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.schema.Pool.Close() // every ping now fails
	resp, err := e.do(e.newRequest(request{method: "GET", path: "/healthz"}))
	if err != nil {
		t.Fatal(err)
	}
	p := wantProblem(t, "healthz without a database", resp, http.StatusServiceUnavailable, "database-unavailable")
	u, _ := url.Parse(e.schema.URL)
	for _, leak := range []string{e.schema.URL, u.Host, u.Query().Get("host"), "dial", "closed pool", "/tmp/"} {
		if leak != "" && strings.Contains(p.Detail, leak) {
			t.Errorf("healthz detail %q leaks %q", p.Detail, leak)
		}
	}
}

// A raw request with trailing garbage sent over a plain TCP connection, the way a hostile
// client would, gets the same 400 problem: nothing between the socket and the server cleans it.
func TestRawTrailingGarbageOverTCP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := strings.TrimPrefix(e.url, "http://")
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"amount_minor":100,"currency":"EUR"}{}`
	fmt.Fprintf(conn, "POST /v1/payments HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: acme\r\nIdempotency-Key: k-raw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within the deadline: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	wantProblem(t, "raw trailing garbage", response{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusBadRequest, "body-invalid")
}

// A body sent as a media type the operation does not declare (or with none) is refused 415
// before any claim: oapi-codegen would decode it as JSON while the fingerprint would read it as
// bytes, so trailing garbage or a repeated member would slip past the body check.
func TestUndeclaredMediaTypeIs415(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded"} {
		req := e.newRequest(create("acme", fmt.Sprintf("k-mt-%d", i), `{"amount_minor":100,"currency":"EUR"}GARBAGE`))
		req.Header.Del("Content-Type")
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := e.do(req)
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, "Content-Type "+ct, resp, http.StatusUnsupportedMediaType, "media-type-unsupported")
	}
	ok := e.send(create("acme", "k-mt-json", `{"amount_minor":100,"currency":"EUR"}`))
	if ok.status != http.StatusCreated {
		t.Fatalf("application/json: %d %s", ok.status, ok.body)
	}
	if n := e.keyRows(); n != 1 {
		t.Fatalf("%d key rows; want 1 (only the JSON request claimed)", n)
	}
}

// A configured MaxRequestBody is the cap, not the default: with a cap of 200 bytes, a body of
// 300 bytes (far under the 1 MiB default) is answered 413 before the claim, and one under the
// cap is served.
func TestConfiguredMaxRequestBodyIsTheCap(t *testing.T) {
	t.Parallel()
	schema := idemtest.TestSchema(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	cfg := schema.Config()
	cfg.Tenant = tenantForStore
	store, err := idem.NewStore(schema.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	const limit = 200
	h := api.NewIdempotentHandler(&payments{db: schema.Pool}, store, &api.IdempotentHandlerOptions{
		Middlewares: []api.StrictMiddlewareFunc{Validate}, MaxRequestBody: limit,
	})
	srv := httptest.NewServer(OuterHandler(schema.Pool, slog.New(slog.NewTextHandler(io.Discard, nil)), h, http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.Timeout = 10 * time.Second
	e := &env{t: t, url: srv.URL, client: client, schema: schema}

	over := `{"amount_minor": 100, "currency": "EUR", "pad": "` + strings.Repeat("x", 300-limit) + strings.Repeat("y", limit) + `"}`
	wantProblem(t, "a body over the configured cap", e.send(create("acme", "k-over", over)), http.StatusRequestEntityTooLarge, "body-too-large")
	if n := e.keyRows(); n != 0 {
		t.Fatalf("%d key rows after a body over the cap; want 0 (refused before the claim)", n)
	}
	if resp := e.send(create("acme", "k-under", body19900)); resp.status != http.StatusCreated {
		t.Fatalf("a body under the cap: %d %s; want 201", resp.status, resp.body)
	}
}
