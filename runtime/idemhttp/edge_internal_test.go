package idemhttp

import (
	"net/http/httptest"
	"testing"
)

// TestEdgeRoute: the edge answers only for a path that is an idempotent operation's route
// exactly, under the base URL, without escaped bytes, and that no route with fewer parameters
// also matches (the router's choice).
func TestEdgeRoute(t *testing.T) {
	capture := &Policy{Operation: "capturePayment", Route: "POST /v1/payments/{payment_id}/capture", Edge: &EdgeRule{}, Key: KeyRule{Header: "Idempotency-Key"}}
	create := &Policy{Operation: "createPayment", Route: "POST /v1/payments", Edge: &EdgeRule{}, Key: KeyRule{Header: "Idempotency-Key"}}
	refund := &Policy{Operation: "refundPayment", Route: "POST /v1/payments/{payment_id}/refunds", Storage: StorageMarker, Edge: &EdgeRule{}, Key: KeyRule{Header: "Idempotency-Key"}}
	ops := []Route{
		{Operation: "capturePayment", Route: "POST /v1/payments/{payment_id}/capture"},
		{Operation: "captureAll", Route: "POST /v1/payments/all/capture"}, // not idempotent, a literal
		{Operation: "createPayment", Route: "POST /v1/payments"},
	}
	for _, c := range []struct {
		base, method, target string
		want                 *Policy
	}{
		{"", "POST", "/v1/payments", create},
		{"", "POST", "/v1/payments/", nil},
		{"", "GET", "/v1/payments", nil},
		{"", "POST", "/api/v1/payments", nil},
		{"/api", "POST", "/api/v1/payments", create},
		{"/api/", "POST", "/api/v1/payments", create},
		{"/api", "POST", "/v1/payments", nil},
		{"", "POST", "/v1/payments/pay_1/capture", capture},
		{"", "POST", "/v1/payments/all/capture", nil}, // the literal route is the router's choice
		{"", "POST", "/v1/payments/pay%201/capture", nil},
		{"", "POST", "/v1/payments/pay%2F1/capture", nil},
		{"", "POST", "/v1/payments//capture", nil},
		{"", "POST", "/v1/payments/pay_1/capture/x", nil},
		{"", "POST", "/v1/payments/pay_1/refunds", nil}, // marker storage: replayed through the handler
	} {
		e := newEdge(nil, c.base, []*Policy{capture, create, refund}, ops)
		r := httptest.NewRequest(c.method, c.target, nil)
		got := e.route(r)
		switch {
		case c.want == nil && got != nil:
			t.Errorf("base %q, %s %s: the edge answers for %s, want the full stack", c.base, c.method, c.target, got.p.Operation)
		case c.want != nil && (got == nil || got.p != c.want):
			t.Errorf("base %q, %s %s: the edge answers for %v, want %s", c.base, c.method, c.target, got, c.want.Operation)
		}
	}
	r := httptest.NewRequest("POST", "/v1/payments/pay_1/capture", nil)
	e := newEdge(nil, "", []*Policy{capture}, ops)
	if v, present, ok := e.route(r).value(r, "path:payment_id"); v != "pay_1" || !present || !ok {
		t.Errorf("path:payment_id of %s is %q (present %v, ok %v), want pay_1", r.URL.Path, v, present, ok)
	}
	if e := newEdge(nil, "", []*Policy{{Route: "POST /v1/x", Key: KeyRule{Header: "K"}}}, nil); e != nil {
		t.Errorf("a policy without an EdgeRule gave an edge")
	}
}
