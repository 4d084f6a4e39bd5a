package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func TestRouteOf(t *testing.T) {
	t.Parallel()
	create := &idemhttp.Policy{Operation: "createPayment", Route: "POST /v1/payments"}
	capture := &idemhttp.Policy{Operation: "capturePayment", Route: "POST /v1/payments/{payment_id}/capture"}
	special := &idemhttp.Policy{Operation: "captureAll", Route: "POST /v1/payments/all/capture"}
	policies := []*idemhttp.Policy{create, capture, special}
	for _, tc := range []struct {
		method, path string
		want         *idemhttp.Policy
	}{
		{"POST", "/v1/payments", create},
		{"POST", "/api/v1/payments", create}, // under a BaseURL
		{"POST", "/v1/payments/p1/capture", capture},
		{"POST", "/v1/payments/all/capture", special}, // a literal segment beats a parameter
		{"GET", "/v1/payments", nil},
		{"POST", "/v1/payments//capture", nil},
		{"POST", "/v1/refunds", nil},
	} {
		if got := idemhttp.RouteOf(policies, tc.method, tc.path); got != tc.want {
			t.Errorf("RouteOf(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer a logger and a test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CaptureFor's own 413 and a refusal written with Refuse are debug records naming the operation
// and its route, never the path (a key may be a path parameter); plain Capture logs nothing.
func TestCaptureForLogsRefusals(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	store := newEnv(t, &idem.Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, nil).Store
	policies := []*idemhttp.Policy{{Operation: "addItem", Route: "PUT /v1/carts/{cart_id}/items"}}
	h := idemhttp.CaptureFor(store, policies, 16)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Refuse(w, r, idemhttp.ParamProblem("quantity"))
	}))
	for _, body := range []string{`{}`, strings.Repeat("x", 17)} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(context.Background(), "PUT", "/v1/carts/secret-cart-key/items", strings.NewReader(body)))
	}
	var got []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got = append(got, rec)
	}
	if len(got) != 2 {
		t.Fatalf("logged %v; want two records", got)
	}
	for i, code := range []string{idemhttp.CodeRequestInvalid, idemhttp.CodeBodyTooLarge} {
		r := got[i]
		if r["level"] != "DEBUG" || r["msg"] != "idem: request refused" || r["code"] != code || r["operation"] != "addItem" ||
			r["route"] != "PUT /v1/carts/{cart_id}/items" || r["method"] != "PUT" {
			t.Errorf("record %d = %v; want a debug refusal of addItem with code %s", i, r, code)
		}
	}
	if strings.Contains(logs.String(), "secret-cart-key") {
		t.Errorf("the log holds the request's path: %s", logs.String())
	}

	logs.mu.Lock()
	logs.b.Reset()
	logs.mu.Unlock()
	plain := idemhttp.Capture(16)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Refuse(w, r, idemhttp.ParamProblem("quantity"))
	}))
	plain.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("PUT", "/v1/carts/c/items", strings.NewReader(`{}`)))
	if s := logs.String(); s != "" {
		t.Errorf("plain Capture logged %s", s)
	}
}
