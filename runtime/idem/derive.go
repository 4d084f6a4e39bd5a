package idem

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// A derived key is the idempotency key a handler or a job sends to a downstream provider (a card
// acquirer, a bank, a webhook receiver), so that the provider deduplicates too: a retry of our
// request, a takeover of an abandoned claim, or a job that River runs a second time after a
// crash all send the provider the same key, and the provider answers the second call with the
// first one's result instead of charging again.
//
// It must be derived, not generated. A fresh UUID per call is a bug: each execution of the same
// request (the retry after a timeout, the takeover after a crash, the job's second run) would
// send the provider a new key, and the provider, seeing a new key, would charge again: exactly
// the double charge the key was meant to prevent. Nor may it be the claim's owner token or its
// attempt number, which change on every takeover for the same reason.

// Derivation identifies one request for deriving provider keys: a SHA-256 digest of its tenant,
// scope and idempotency key. It is the same on every attempt, takeover and job run of that
// request, and differs between requests, tenants and scopes. It holds no raw key, so it can be
// stored where the key should not be (a job's arguments, a log line); it marshals as 64 hex
// digits.
type Derivation [sha256.Size]byte

// derivationDomain separates these digests from every other SHA-256 of the same strings.
const derivationDomain = "idemgen derived key v1"

// NewDerivation is the Derivation of the request with this tenant, scope and key: the raw values
// a Claim carries (the tenant as Config.Tenant returned it, not as the key table stores it).
// Each value is length-prefixed, so no two different triples encode alike, whatever bytes
// (separators, NULs) they hold.
func NewDerivation(tenant, scope, key string) Derivation {
	h := sha256.New()
	writeField(h, derivationDomain)
	writeField(h, tenant)
	writeField(h, scope)
	writeField(h, key)
	var d Derivation
	h.Sum(d[:0])
	return d
}

// writeField writes s as its length (8 bytes, big-endian) and its bytes.
func writeField(w interface{ Write([]byte) (int, error) }, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	_, _ = w.Write(n[:]) // a hash.Hash never fails to write
	_, _ = w.Write([]byte(s))
}

// Derivation returns the claim's Derivation.
func (c *Claim) Derivation() Derivation { return NewDerivation(c.Tenant, c.Scope, c.Key) }

// DerivationFromContext returns the Derivation of the claim under which a handler runs; ok is
// false outside a handler run by Do or by generated code.
func DerivationFromContext(ctx context.Context) (d Derivation, ok bool) {
	c, ok := ClaimFromContext(ctx)
	if !ok {
		return Derivation{}, false
	}
	return c.Derivation(), true
}

// Key returns the idempotency key to send to provider for this request: HMAC-SHA256 keyed with
// the Derivation over the provider's name, so every provider sees a different key for the same
// request and none can compute another's. It is shaped as a UUID (RFC 9562 version 8: 122 bits
// of the digest), which every provider that accepts idempotency keys takes, also those that
// insist on UUIDs. provider is any stable name ("acquirer", "bank:payouts"); renaming it changes
// the key, so a rename must not happen while requests are in flight.
func (d Derivation) Key(provider string) string {
	m := hmac.New(sha256.New, d[:])
	writeField(m, provider)
	sum := m.Sum(nil)
	sum[6] = sum[6]&0x0f | 0x80 // version 8
	sum[8] = sum[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(sum[:16])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// String returns the Derivation as 64 hex digits.
func (d Derivation) String() string { return hex.EncodeToString(d[:]) }

// MarshalText implements encoding.TextMarshaler, so a Derivation is a JSON string in a job's
// arguments.
func (d Derivation) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: 64 hex digits, as MarshalText writes them.
func (d *Derivation) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(d) {
		return fmt.Errorf("idem: derivation %q: want %d hex digits", b, 2*len(d))
	}
	if _, err := hex.Decode(d[:], b); err != nil {
		return fmt.Errorf("idem: derivation %q: %w", b, err)
	}
	return nil
}

// ErrNoClaim is DerivedKey's error outside a claimed request.
var ErrNoClaim = errors.New("idem: no claim in the context: a derived key needs the request's idempotency key (call it inside a handler run by Do or by generated code, or keep the request's Derivation and call its Key)")

// DerivedKey returns the key to send to provider for the request whose claim ctx carries:
// DerivationFromContext(ctx).Key(provider). It is stable across every retry, takeover and
// re-run of that request and distinct for different requests, tenants, scopes and providers.
// Outside a claimed request it returns ErrNoClaim; a job carries the request's Derivation
// instead (see its Key).
func DerivedKey(ctx context.Context, provider string) (string, error) {
	d, ok := DerivationFromContext(ctx)
	if !ok {
		return "", ErrNoClaim
	}
	return d.Key(provider), nil
}
