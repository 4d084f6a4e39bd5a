package policy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/policy"
)

func receiver(sig string) policy.Field[policy.RawDelivery] {
	return policy.Value(policy.RawDelivery{Signature: policy.Value(sig, policy.Position{Line: 3})}, policy.Position{Line: 2})
}

// TestReceiverDefaults: a receiver's key is its sender's delivery id, and the request-side
// defaults that do not fit a sender give way (scope, fingerprint, persist, wait), unless the
// operation sets them itself; the document's defaults do not reach them.
func TestReceiverDefaults(t *testing.T) {
	t.Parallel()
	op := &policy.Operation{Method: "POST", Path: "/webhooks/x"}
	defs := &policy.Raw{
		TTL:     policy.Value(4*24*time.Hour, policy.Position{Line: 1}),
		Scope:   policy.Value([]policy.Placed[policy.ScopeItem]{{V: policy.ScopeItem{Kind: policy.ScopeTenant}}}, policy.Position{Line: 1}),
		Persist: policy.Value([]string{"2xx", "4xx"}, policy.Position{Line: 1}),
	}
	for _, tc := range []struct {
		sig, header, pointer string
	}{
		{policy.SignatureStandardWebhooks, "webhook-id", ""},
		{policy.SignatureStripe, "", "/id"},
		{policy.SignatureGitHub, "X-GitHub-Delivery", ""},
	} {
		p, diags := policy.Resolve(policy.Input{Raw: &policy.Raw{Delivery: receiver(tc.sig)}, Defaults: defs, Op: op})
		if len(diags) > 0 {
			t.Fatalf("%s: %v", tc.sig, diags)
		}
		d := p.Delivery
		if d == nil || d.KeyHeader != tc.header || d.KeyPointer != tc.pointer || p.Key.Header != tc.header || !p.Key.Required {
			t.Errorf("%s: delivery %+v, key %+v; want the id in %q%q", tc.sig, d, p.Key, tc.header, tc.pointer)
		}
		if !slices.Equal(p.Scope, []policy.ScopeItem{{Kind: policy.ScopeOperation}}) || !p.NoFingerprint ||
			!slices.Equal(p.Persist, []string{"2xx"}) || p.Wait != p.Lease {
			t.Errorf("%s: scope %v, fingerprint off %v, persist %v, wait %v (lease %v); want [operation], off, [2xx], the lease",
				tc.sig, p.Scope, p.NoFingerprint, p.Persist, p.Wait, p.Lease)
		}
		want := policy.DefaultTolerance
		if tc.sig == policy.SignatureGitHub {
			want = 0 // GitHub signs no timestamp
		}
		if d.Tolerance != want {
			t.Errorf("%s: tolerance %v, want %v", tc.sig, d.Tolerance, want)
		}
	}

	// What the operation sets itself stands.
	raw := &policy.Raw{
		Delivery:    receiver(policy.SignatureStripe),
		Fingerprint: policy.Value(true, policy.Position{Line: 4}),
		Persist:     policy.Value([]string{"2xx", "4xx"}, policy.Position{Line: 5}),
		Wait:        policy.Value(time.Second, policy.Position{Line: 6}),
	}
	p, diags := policy.Resolve(policy.Input{Raw: raw, Defaults: defs, Op: op})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	if p.NoFingerprint || !slices.Equal(p.Persist, []string{"2xx", "4xx"}) || p.Wait != time.Second {
		t.Errorf("the operation's own fingerprint, persist and wait were not kept: %v %v %v", p.NoFingerprint, p.Persist, p.Wait)
	}
}

func TestDetectSender(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		headers []string
		want    string
	}{
		{[]string{"webhook-id", "webhook-timestamp", "webhook-signature"}, policy.SignatureStandardWebhooks},
		{[]string{"Webhook-Id", "Webhook-Signature"}, policy.SignatureStandardWebhooks},
		{[]string{"webhook-id"}, ""}, // an id alone says nothing of how it is signed
		{[]string{"Stripe-Signature"}, policy.SignatureStripe},
		{[]string{"X-GitHub-Delivery", "X-GitHub-Event"}, policy.SignatureGitHub},
		{[]string{"x-hub-signature-256"}, policy.SignatureGitHub},
		{[]string{"Idempotency-Key", "X-Request-Id"}, ""},
	} {
		if got := policy.DetectSender(tc.headers); got != tc.want {
			t.Errorf("DetectSender(%v) = %q, want %q", tc.headers, got, tc.want)
		}
	}
}
