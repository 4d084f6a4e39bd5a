package idemhttp

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
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

// TestHandlerReusesTheEdgesFingerprint: the handler's fingerprint (Op.request) reuses the sum
// the edge computed for the same body (Body.print) only when it is computed under the same
// policy, with the parts as bound framed exactly as the edge framed them as sent, over the very
// bytes and media type the edge framed; anything else is hashed anew. The edge's sum is a
// sentinel here, so that reuse shows; the sum hashed anew is checked against a full computation.
func TestHandlerReusesTheEdgesFingerprint(t *testing.T) {
	p := &Policy{Operation: "createPayment", Route: "POST /v1/payments", Body: true, Key: KeyRule{Header: "Idempotency-Key"}}
	other := *p
	account := "acc_1"
	body := []byte(`{"amount_minor": 100, "currency": "EUR"}`)
	const mediaType = "application/json"
	framed := func(account string) []byte {
		fp := idem.NewFingerprinter(p.Route)
		if err := fp.Add("header:X-Account", &account); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), fp.Framed()...)
	}
	full := func(account string, b []byte) string {
		fp := idem.NewFingerprinter(p.Route)
		_ = fp.Add("header:X-Account", &account)
		if err := fp.RawBody(mediaType, b, p.Exclude...); err != nil {
			t.Fatal(err)
		}
		return fp.Sum()
	}
	for _, c := range []struct {
		name   string
		policy *Policy     // the policy the handler computes under
		print  func(*Body) // what the edge left on the body
		reused bool
	}{
		{"the edge's reading", p, func(b *Body) {}, true},
		{"no edge", p, func(b *Body) { b.print = bodyPrint{} }, false},
		{"another policy", &other, func(b *Body) {}, false},
		{"another part", p, func(b *Body) { b.print.framed = framed("acc_2") }, false},
		{"another media type", p, func(b *Body) { b.print.contentType = "application/merge-patch+json" }, false},
		{"a copy of the bytes", p, func(b *Body) { b.print.bytes = append([]byte(nil), body...) }, false},
		{"fewer bytes", p, func(b *Body) { b.print.bytes = body[:len(body)-1] }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Body{ContentType: mediaType, Bytes: body}
			b.print = bodyPrint{p: p, framed: framed(account), bytes: b.Bytes, contentType: mediaType, sum: "the edge's sum"}
			c.print(b)
			op := &Op[any]{Parts: []Part{{Name: "header:X-Account", Value: &account}}}
			req, err := op.request(WithBody(context.Background(), b), c.policy)
			if err != nil {
				t.Fatal(err)
			}
			want := full(account, body)
			if c.reused {
				want = "the edge's sum"
			}
			if req.Fingerprint != want {
				t.Fatalf("fingerprint %q; want %q (reused: %v)", req.Fingerprint, want, c.reused)
			}
		})
	}
}
