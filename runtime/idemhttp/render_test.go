package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// apiError is an API's own error body, as a Renderer writes it.
type apiError struct {
	Status int    `json:"status"`
	Code   string `json:"errorCode"`
	Detail string `json:"message"`
}

func apiRenderer(mediaType string) idemhttp.Renderer {
	return idemhttp.RendererFunc(func(w http.ResponseWriter, r *http.Request, p *idemhttp.Problem) error {
		w.Header().Set("Content-Type", mediaType)
		w.WriteHeader(p.Status)
		return json.NewEncoder(w).Encode(apiError{p.Status, "API." + p.Code, p.Detail})
	})
}

// TestRendererAnswersEveryRefusal: with CaptureWith's Renderer, a refusal Handle decides (a
// missing key, a duplicate in progress with its Retry-After), one generated code answers with
// Refuse (binding) and a handler's *Problem (501 not-implemented, through ResponseErrorHandler)
// are all the API's own body and media type, with Cache-Control: no-store and the operation's
// echo headers; a per-operation renderer wins for its operation; and a replay carries the
// retry's echo header, never the stored one.
func TestRendererAnswersEveryRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := &idemhttp.Policy{
		Operation: "createPayment", Route: "POST /v1/payments",
		Key:         idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
		Body:        true,
		EchoHeaders: []string{"X-Interaction-Id"},
	}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		res, err := idemhttp.Handle(r.Context(), e.Store, p, &idemhttp.Op[answer]{
			Key:   r.Header.Get("Idempotency-Key"),
			Scope: []idemhttp.Part{{Name: "operation"}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				if r.Header.Get("X-Slow") != "" {
					<-release
				}
				_, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 1)", r.Header.Get("Idempotency-Key"))
				return answer{201}, err
			},
			Record: func(a answer) (*idem.Outcome, error) {
				return &idem.Outcome{Status: a.status, Header: http.Header{"X-Interaction-Id": {r.Header.Get("X-Interaction-Id")}}, Body: []byte(`{"id":1}`)}, nil
			},
		})
		if err != nil {
			idemhttp.ResponseErrorHandler(e.Store)(w, r, err)
			return
		}
		_ = res.WriteTo(w)
	})
	mux.HandleFunc("GET /v1/payments/{id}", func(w http.ResponseWriter, r *http.Request) {
		idemhttp.ResponseErrorHandler(e.Store)(w, r, idemhttp.NotImplemented("getPayment"))
	})
	mux.HandleFunc("GET /v1/refunds/{id}", func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Refuse(w, r, idemhttp.ParamProblem("id"))
	})
	srv := httptest.NewServer(idemhttp.CaptureWith(e.Store, []*idemhttp.Policy{p}, idemhttp.CaptureOptions{
		Renderer:           apiRenderer("application/vnd.api+json"),
		OperationRenderers: map[string]idemhttp.Renderer{"getRefund": apiRenderer("application/vnd.refunds+json")},
		Operations:         []idemhttp.Route{{Operation: "getPayment", Route: "GET /v1/payments/{id}"}, {Operation: "getRefund", Route: "GET /v1/refunds/{id}"}},
	})(mux))
	defer srv.Close()

	send := func(method, path string, header map[string]string) (*http.Response, apiError) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body apiError
		_ = json.Unmarshal(b, &body)
		return resp, body
	}
	check := func(what string, resp *http.Response, body apiError, status int, mediaType, code, interaction string) {
		t.Helper()
		if resp.StatusCode != status || resp.Header.Get("Content-Type") != mediaType || body.Code != "API."+code {
			t.Errorf("%s: %d %q %+v; want %d %s API.%s", what, resp.StatusCode, resp.Header.Get("Content-Type"), body, status, mediaType, code)
		}
		if resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", what, resp.Header.Get("Cache-Control"))
		}
		if got := resp.Header.Get("X-Interaction-Id"); got != interaction {
			t.Errorf("%s: X-Interaction-Id %q, want %q", what, got, interaction)
		}
		// The client reads the refusal from this header, whatever the API's body looks like.
		if got := resp.Header.Get(idemhttp.HeaderRefusal); got != code {
			t.Errorf("%s: %s %q, want %q", what, idemhttp.HeaderRefusal, got, code)
		}
	}

	resp, body := send("POST", "/v1/payments", map[string]string{"X-Interaction-Id": "ia-1"})
	check("missing key", resp, body, 400, "application/vnd.api+json", idemhttp.CodeKeyMissing, "ia-1")
	resp, body = send("GET", "/v1/payments/7", nil)
	check("not implemented", resp, body, 501, "application/vnd.api+json", idemhttp.CodeNotImplemented, "")
	resp, body = send("GET", "/v1/refunds/7", nil)
	check("per-operation renderer", resp, body, 400, "application/vnd.refunds+json", idemhttp.CodeRequestInvalid, "")

	// A duplicate while the first runs: 409 in-progress with its Retry-After, in the API's format.
	done := make(chan *http.Response, 1)
	go func() {
		r, _ := send("POST", "/v1/payments", map[string]string{"Idempotency-Key": "k1", "X-Slow": "1", "X-Interaction-Id": "ia-first"})
		done <- r
	}()
	table := pgx.Identifier{e.Store.Config().Schema, e.Store.Config().Table}.Sanitize()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := e.Sch.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE key = 'k1' AND state = 'in_flight'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the first request did not claim k1 within 10s")
		}
	}
	dup, body := send("POST", "/v1/payments", map[string]string{"Idempotency-Key": "k1", "X-Interaction-Id": "ia-dup"})
	close(release)
	check("in progress", dup, body, 409, "application/vnd.api+json", idemhttp.CodeInProgress, "ia-dup")
	if dup.Header.Get("Retry-After") == "" {
		t.Error("in progress: no Retry-After in the API's format")
	}
	if first := <-done; first.StatusCode != 201 || first.Header.Get("X-Interaction-Id") != "ia-first" {
		t.Fatalf("first request: %d %q", first.StatusCode, first.Header.Get("X-Interaction-Id"))
	}
	replay, _ := send("POST", "/v1/payments", map[string]string{"Idempotency-Key": "k1", "X-Interaction-Id": "ia-retry"})
	if replay.StatusCode != 201 || replay.Header.Get(idemhttp.HeaderReplayed) != "true" || replay.Header.Get("X-Interaction-Id") != "ia-retry" {
		t.Errorf("replay: %d replayed=%q X-Interaction-Id %q; want 201, replayed, the retry's ia-retry",
			replay.StatusCode, replay.Header.Get(idemhttp.HeaderReplayed), replay.Header.Get("X-Interaction-Id"))
	}
}

// TestCaptureWithRequiresItsRenderer: an operation whose spec says renderer: custom cannot be
// served without one: CaptureWith panics at startup, naming the operation and the fix.
func TestCaptureWithRequiresItsRenderer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	defer func() {
		v := recover()
		if s, _ := v.(string); !strings.Contains(s, "createPayment") || !strings.Contains(s, "Renderer") {
			t.Errorf("CaptureWith without a renderer: recovered %v; want a panic naming createPayment and the Renderer", v)
		}
	}()
	idemhttp.CaptureWith(e.Store, nil, idemhttp.CaptureOptions{RequireRenderer: []string{"createPayment"}})
	t.Error("CaptureWith did not panic")
}

// TestNotImplementedIsAProblem: the generated unimplemented base's error is the 501 problem,
// through ErrorProblem, so it is answered, not logged as a failure.
func TestNotImplementedIsAProblem(t *testing.T) {
	t.Parallel()
	p := idemhttp.ErrorProblem(errors.Join(idemhttp.NotImplemented("createPayment")))
	if p == nil || p.Status != http.StatusNotImplemented || p.Code != idemhttp.CodeNotImplemented || !strings.Contains(p.Detail, "createPayment") {
		t.Fatalf("ErrorProblem(NotImplemented) = %+v", p)
	}
}

// TestRefusalHeaderOutlivesTheRenderer: a renderer that rebuilds the header from scratch still
// answers with Idempotency-Refusal, which clients read; a problem of the application's own code
// carries none (it tells a client nothing it could act on), and neither does a success.
func TestRefusalHeaderOutlivesTheRenderer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	wipe := idemhttp.RendererFunc(func(w http.ResponseWriter, r *http.Request, p *idemhttp.Problem) error {
		for k := range w.Header() {
			delete(w.Header(), k)
		}
		w.Header().Set("Content-Type", "text/plain")
		_, err := w.Write([]byte("refused")) // no WriteHeader: 200, as net/http would
		return err
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /busy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemhttp.HeaderRefusal, "stale") // set before, by mistake: replaced
		_ = idemhttp.Render(w, r, idemhttp.NewProblem(http.StatusConflict, idemhttp.CodeInProgress, "busy"))
	})
	mux.HandleFunc("GET /own", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(idemhttp.HeaderRefusal, idemhttp.CodeInProgress) // an application's stray header
		_ = idemhttp.Render(w, r, &idemhttp.Problem{Type: "https://example.com/out-of-stock", Title: "Out of stock", Status: 409, Code: "out-of-stock"})
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, rd := range []idemhttp.Renderer{wipe, nil} {
		srv := httptest.NewServer(idemhttp.CaptureWith(e.Store, nil, idemhttp.CaptureOptions{Renderer: rd})(mux))
		for path, want := range map[string]string{"/busy": idemhttp.CodeInProgress, "/own": "", "/ok": ""} {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got := resp.Header.Get(idemhttp.HeaderRefusal); got != want {
				t.Errorf("renderer %v, GET %s: %s %q, want %q", rd != nil, path, idemhttp.HeaderRefusal, got, want)
			}
		}
		srv.Close()
	}
}

// TestRendererOfTheMoreSpecificRoute: when two operations' routes match a path (a literal
// segment and a parameter: /v1/payments/search and /v1/payments/{id}), a refusal is rendered by
// the more specific route's renderer, whichever order the routes are listed in: for the
// operations that are not idempotent (CaptureOptions.Operations) and for the idempotent ones
// (their policies) alike.
func TestRendererOfTheMoreSpecificRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	mux := http.NewServeMux()
	refuse := func(w http.ResponseWriter, r *http.Request) { idemhttp.Refuse(w, r, idemhttp.ParamProblem("q")) }
	mux.HandleFunc("GET /v1/payments/{id}", refuse)
	mux.HandleFunc("POST /v1/payments/{id}/capture", refuse)
	renderers := map[string]idemhttp.Renderer{}
	for _, op := range []string{"getPayment", "searchPayments", "capturePayment", "captureBatch"} {
		renderers[op] = apiRenderer("application/vnd." + op + "+json")
	}
	routes := []idemhttp.Route{{Operation: "getPayment", Route: "GET /v1/payments/{id}"}, {Operation: "searchPayments", Route: "GET /v1/payments/search"}}
	policies := []*idemhttp.Policy{
		{Operation: "capturePayment", Route: "POST /v1/payments/{id}/capture", Key: idemhttp.KeyRule{Header: "Idempotency-Key"}},
		{Operation: "captureBatch", Route: "POST /v1/payments/batch/capture", Key: idemhttp.KeyRule{Header: "Idempotency-Key"}},
	}
	reversed := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = n - 1 - i
		}
		return out
	}
	for _, order := range [][]int{{0, 1}, reversed(2)} {
		rs := []idemhttp.Route{routes[order[0]], routes[order[1]]}
		ps := []*idemhttp.Policy{policies[order[0]], policies[order[1]]}
		srv := httptest.NewServer(idemhttp.CaptureWith(e.Store, ps, idemhttp.CaptureOptions{
			Renderer: apiRenderer("application/vnd.default+json"), OperationRenderers: renderers, Operations: rs,
		})(mux))
		for _, c := range []struct{ method, path, want string }{
			{"GET", "/v1/payments/search", "searchPayments"},
			{"GET", "/v1/payments/p-1", "getPayment"},
			{"POST", "/v1/payments/batch/capture", "captureBatch"},
			{"POST", "/v1/payments/p-1/capture", "capturePayment"},
		} {
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if got, want := resp.Header.Get("Content-Type"), "application/vnd."+c.want+"+json"; got != want {
				t.Errorf("routes listed %v: %s %s rendered as %q, want %s's renderer (%s)", order, c.method, c.path, got, c.want, want)
			}
		}
		srv.Close()
	}
}
