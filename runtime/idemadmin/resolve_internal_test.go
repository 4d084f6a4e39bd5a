package idemadmin

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

func TestResolveTokenExpiresAndIsBoundToKeyAndActor(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	h := NewHandler(nil, &Options{TokenSecret: []byte("0123456789abcdef0123456789abcdef")})
	h.now = func() time.Time { return now }
	k := &idem.KeyInfo{Tenant: "acme", Scope: "createPayment", Key: "pay-9"}
	tok := h.token(now.Add(ResolveTokenTTL), "alice", k)
	if !h.tokenFor(tok, "alice", k) {
		t.Fatal("a fresh token is refused")
	}
	for name, ok := range map[string]bool{
		"another actor":  h.tokenFor(tok, "bob", k),
		"another tenant": h.tokenFor(tok, "alice", &idem.KeyInfo{Tenant: "globex", Scope: k.Scope, Key: k.Key}),
		"another scope":  h.tokenFor(tok, "alice", &idem.KeyInfo{Tenant: k.Tenant, Scope: "refundPayment", Key: k.Key}),
		// The parts are length-prefixed: moving a byte from one to the next is another key.
		"shifted parts": h.tokenFor(tok, "alice", &idem.KeyInfo{Tenant: "acm", Scope: "ecreatePayment", Key: k.Key}),
		"a later expiry": h.tokenFor(
			"9999999999"+tok[len("1796558400"):], "alice", k),
	} {
		if ok {
			t.Errorf("%s: the token is accepted", name)
		}
	}
	now = now.Add(ResolveTokenTTL + time.Second)
	if h.tokenFor(tok, "alice", k) {
		t.Error("an expired token is accepted")
	}
	// The same secret in another process accepts it; another secret does not.
	h2 := NewHandler(nil, &Options{TokenSecret: h.secret})
	h2.now = func() time.Time { return now.Add(-time.Minute) }
	h3 := NewHandler(nil, nil)
	h3.now = h2.now
	if !h2.tokenFor(tok, "alice", k) || h3.tokenFor(tok, "alice", k) {
		t.Error("the token is not bound to the secret alone")
	}
}
