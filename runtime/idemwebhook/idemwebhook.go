// Package idemwebhook verifies webhook deliveries and finds their delivery id, for a receiver
// that deduplicates them: the signature is checked on the body as sent, before anything is
// claimed, so a forged, replayed-after-expiry or unsigned delivery never binds a key.
//
// Three signing schemes are supported, each as its sender documents it:
//
//   - [StandardWebhooks] (the Standard Webhooks specification, used by Svix and others):
//     headers webhook-id, webhook-timestamp (Unix seconds) and webhook-signature, a
//     space-separated list of "v1,<base64 HMAC-SHA256>" over "<id>.<timestamp>.<body>".
//     A secret is written "whsec_<base64>"; the HMAC key is the decoded bytes.
//   - [Stripe]: header Stripe-Signature, "t=<unix seconds>,v1=<hex HMAC-SHA256>,…" over
//     "<t>.<body>"; several v1 entries during a secret rotation. The HMAC key is the secret as
//     written ("whsec_…" included).
//   - [GitHub]: header X-Hub-Signature-256, "sha256=<hex HMAC-SHA256>" over the body. GitHub
//     signs no timestamp, so there is no tolerance to check.
//
// Secrets come from the application, never from the spec: a [Verifier] asks its Secrets
// function on every delivery, so a rotation (two secrets valid at once) needs no restart. Every
// comparison is constant-time. The package imports only the standard library.
package idemwebhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme is a sender's signing scheme, as x-idempotency delivery.signature names it.
type Scheme string

const (
	StandardWebhooks Scheme = "standard-webhooks"
	Stripe           Scheme = "stripe"
	GitHub           Scheme = "github"
)

// Schemes lists every scheme, in the order messages name them.
var Schemes = []Scheme{StandardWebhooks, Stripe, GitHub}

// The headers each scheme reads.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	HeaderStripeSignature  = "Stripe-Signature"
	HeaderGitHubSignature  = "X-Hub-Signature-256"
	HeaderGitHubDelivery   = "X-GitHub-Delivery"
)

// DefaultTolerance is how far a signed timestamp may be from the receiver's clock when
// Verifier.Tolerance is zero: five minutes, what Standard Webhooks and Stripe recommend.
const DefaultTolerance = 5 * time.Minute

// Reason says, in one word, why a delivery was refused.
type Reason string

const (
	ReasonUnsigned  Reason = "unsigned"  // the signature header (or, for Standard Webhooks, the id or timestamp) is missing
	ReasonMalformed Reason = "malformed" // a header is there but cannot be read
	ReasonMismatch  Reason = "mismatch"  // no signature matches any secret
	ReasonExpired   Reason = "expired"   // the signed timestamp is outside the tolerance
	ReasonNoSecret  Reason = "no-secret" // the application gave no secret to verify with
	ReasonNoKey     Reason = "no-key"    // the delivery carries no delivery id where the spec says it is
)

// Error is a refused delivery: why (Reason) and a sentence a sender's operator can act on
// (Detail). It never contains a secret or a computed signature.
type Error struct {
	Reason Reason
	Detail string
}

func (e *Error) Error() string {
	return "idemwebhook: delivery refused (" + string(e.Reason) + "): " + e.Detail
}

func refuse(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Verifier checks the signature of one receiver's deliveries.
type Verifier struct {
	Scheme Scheme
	// Tolerance bounds the distance between a delivery's signed timestamp and Now
	// (DefaultTolerance when zero): an older delivery is refused as expired, so a captured one
	// cannot be replayed later. Not used by GitHub, which signs no timestamp.
	Tolerance time.Duration
	// Secrets returns the secrets a delivery may be signed with: more than one while a secret
	// is rotated. It is called once per delivery; none (or an error) refuses every delivery.
	// For Standard Webhooks, a secret is written "whsec_<base64>" ([ParseSecret]).
	Secrets func(ctx context.Context) ([]string, error)
	// Now is the receiver's clock (time.Now when nil).
	Now func() time.Time
}

// Static is a Secrets function returning secrets.
func Static(secrets ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return secrets, nil }
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Verifier) tolerance() time.Duration {
	if v.Tolerance > 0 {
		return v.Tolerance
	}
	return DefaultTolerance
}

// Verify checks the delivery whose headers are h and whose body, as sent, is body. It returns
// nil when a signature matches one of the secrets, else an *Error.
func (v *Verifier) Verify(ctx context.Context, h http.Header, body []byte) error {
	var secrets []string
	if v.Secrets != nil {
		s, err := v.Secrets(ctx)
		if err != nil {
			return refuse(ReasonNoSecret, "the receiver could not load its signing secrets: %v", err)
		}
		secrets = s
	}
	if len(secrets) == 0 {
		return refuse(ReasonNoSecret, "the receiver has no signing secret configured, so no delivery can be verified")
	}
	switch v.Scheme {
	case StandardWebhooks:
		return v.verifyStandard(h, body, secrets)
	case Stripe:
		return v.verifyStripe(h, body, secrets)
	case GitHub:
		return verifyGitHub(h, body, secrets)
	}
	return refuse(ReasonMalformed, "unknown signature scheme %q", v.Scheme)
}

// one returns the single value of header name: ok false when it is absent, an error when it
// was sent more than once.
func one(h http.Header, name string) (string, bool, *Error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", true, refuse(ReasonMalformed, "the %s header was sent %d times", name, len(vs))
}

// checkTime reads a Unix-seconds timestamp and checks it against the tolerance.
func (v *Verifier) checkTime(name, s string) *Error {
	sec, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return refuse(ReasonMalformed, "the %s %q is not a Unix time in seconds", name, s)
	}
	skew := v.now().Sub(time.Unix(sec, 0))
	if skew < 0 {
		skew = -skew
	}
	if skew > v.tolerance() {
		return refuse(ReasonExpired, "the %s is %s away from the receiver's clock, more than the tolerance of %s (a delivery is signed anew on every attempt)", name, skew.Round(time.Second), v.tolerance())
	}
	return nil
}

func (v *Verifier) verifyStandard(h http.Header, body []byte, secrets []string) error {
	id, okID, e1 := one(h, HeaderWebhookID)
	ts, okTS, e2 := one(h, HeaderWebhookTimestamp)
	sig, okSig, e3 := one(h, HeaderWebhookSignature)
	if err := firstErr(e1, e2, e3); err != nil {
		return err
	}
	if !okID || !okTS || !okSig {
		return refuse(ReasonUnsigned, "a Standard Webhooks delivery carries the webhook-id, webhook-timestamp and webhook-signature headers; missing: %s", missing(
			[]string{HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature}, []bool{okID, okTS, okSig}))
	}
	if err := v.checkTime(HeaderWebhookTimestamp, ts); err != nil {
		return err
	}
	var candidates [][]byte
	for _, part := range strings.Fields(sig) {
		version, value, ok := strings.Cut(part, ",")
		if !ok || version != "v1" {
			continue // another version (v1a: asymmetric) or junk: not ours to judge
		}
		if mac, err := base64.StdEncoding.DecodeString(value); err == nil {
			candidates = append(candidates, mac)
		}
	}
	if len(candidates) == 0 {
		return refuse(ReasonMalformed, "the webhook-signature header holds no v1,<base64> signature")
	}
	msg := standardMessage(id, strings.TrimSpace(ts), body)
	for _, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return refuse(ReasonNoSecret, "a configured secret is not a Standard Webhooks secret: %v", err)
		}
		want := mac(key, msg)
		for _, got := range candidates {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return refuse(ReasonMismatch, "no webhook-signature matches the receiver's secrets")
}

func (v *Verifier) verifyStripe(h http.Header, body []byte, secrets []string) error {
	header, ok, e := one(h, HeaderStripeSignature)
	if e != nil {
		return e
	}
	if !ok {
		return refuse(ReasonUnsigned, "a Stripe delivery carries the Stripe-Signature header, and this one has none")
	}
	var ts string
	var candidates [][]byte
	for _, part := range strings.Split(header, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = val
		case "v1":
			if mac, err := hex.DecodeString(val); err == nil {
				candidates = append(candidates, mac)
			}
		}
	}
	if ts == "" || len(candidates) == 0 {
		return refuse(ReasonMalformed, "the Stripe-Signature header needs t=<timestamp> and at least one v1=<hex signature>")
	}
	if err := v.checkTime("Stripe-Signature timestamp", ts); err != nil {
		return err
	}
	msg := append([]byte(ts+"."), body...)
	for _, s := range secrets {
		want := mac([]byte(s), msg)
		for _, got := range candidates {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return refuse(ReasonMismatch, "no Stripe-Signature v1 signature matches the receiver's secrets")
}

func verifyGitHub(h http.Header, body []byte, secrets []string) error {
	header, ok, e := one(h, HeaderGitHubSignature)
	if e != nil {
		return e
	}
	if !ok {
		return refuse(ReasonUnsigned, "a GitHub delivery carries the X-Hub-Signature-256 header, and this one has none (set a secret on the webhook)")
	}
	hexMAC, found := strings.CutPrefix(strings.TrimSpace(header), "sha256=")
	got, err := hex.DecodeString(hexMAC)
	if !found || err != nil {
		return refuse(ReasonMalformed, "the X-Hub-Signature-256 header is not sha256=<hex signature>")
	}
	for _, s := range secrets {
		if hmac.Equal(got, mac([]byte(s), body)) {
			return nil
		}
	}
	return refuse(ReasonMismatch, "the X-Hub-Signature-256 signature matches none of the receiver's secrets")
}

func firstErr(errs ...*Error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func missing(names []string, present []bool) string {
	var out []string
	for i, n := range names {
		if !present[i] {
			out = append(out, n)
		}
	}
	return strings.Join(out, ", ")
}

func mac(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

func standardMessage(id, ts string, body []byte) []byte {
	msg := make([]byte, 0, len(id)+len(ts)+2+len(body))
	msg = append(msg, id...)
	msg = append(msg, '.')
	msg = append(msg, ts...)
	msg = append(msg, '.')
	return append(msg, body...)
}

// ParseSecret reads a Standard Webhooks secret, "whsec_<base64>", into its key bytes.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, "whsec_")
	if !ok {
		return nil, errors.New(`a Standard Webhooks secret starts with "whsec_"`)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return nil, errors.New(`the part after "whsec_" is not base64`)
	}
	return key, nil
}

// SignStandard returns the webhook-signature header value a Standard Webhooks sender writes for
// a delivery: "v1,<base64>" for each secret, space-separated. A sender (or a test) uses it; a
// receiver uses [Verifier].
func SignStandard(id string, ts time.Time, body []byte, secrets ...string) (string, error) {
	var sigs []string
	for _, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac(key, standardMessage(id, strconv.FormatInt(ts.Unix(), 10), body))))
	}
	return strings.Join(sigs, " "), nil
}

// SignStripe returns the Stripe-Signature header value for body signed at ts with each secret.
func SignStripe(ts time.Time, body []byte, secrets ...string) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	parts := []string{"t=" + t}
	for _, s := range secrets {
		parts = append(parts, "v1="+hex.EncodeToString(mac([]byte(s), append([]byte(t+"."), body...))))
	}
	return strings.Join(parts, ",")
}

// SignGitHub returns the X-Hub-Signature-256 header value for body signed with secret.
func SignGitHub(body []byte, secret string) string {
	return "sha256=" + hex.EncodeToString(mac([]byte(secret), body))
}
