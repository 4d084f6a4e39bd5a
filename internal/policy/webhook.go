package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// A webhook receiver is an operation a sender delivers events to: x-idempotency delivery says
// how the sender signs its deliveries and where a delivery's id is. The id is the key; the
// signature is verified before it is claimed (runtime/idemwebhook).

// Signature schemes, as delivery.signature names them.
const (
	SignatureStandardWebhooks = string(idemwebhook.StandardWebhooks)
	SignatureStripe           = string(idemwebhook.Stripe)
	SignatureGitHub           = string(idemwebhook.GitHub)
)

// Signatures lists every signature scheme, in the order messages name them.
var Signatures = []string{SignatureStandardWebhooks, SignatureStripe, SignatureGitHub}

// Sender is what idemgen knows of the senders that sign with a scheme: where their delivery id
// is, and how long they deliver one event again. A key forgotten before the last redelivery
// runs that redelivery again, so the TTL must cover RetryWindow (rule delivery-ttl-short).
type Sender struct {
	Signature   string
	KeyHeader   string // the delivery id's header, or ""
	KeyPointer  string // the delivery id's JSON pointer into the body, or ""
	RetryWindow time.Duration
	// Source says where RetryWindow comes from, for messages and docs.
	Source string
	// Timestamped: the scheme signs a timestamp, so delivery.tolerance applies.
	Timestamped bool
}

// Senders are the built-in defaults per signature scheme. The numbers are the senders' own
// documentation's; docs/x-idempotency.md lists them with their sources.
var Senders = []Sender{
	{SignatureStandardWebhooks, idemwebhook.HeaderWebhookID, "", 28 * time.Hour,
		"Svix's documented schedule for Standard Webhooks senders: attempts after 5s, 5m, 30m, 2h, 5h, 10h and 10h, about 27.6 hours", true},
	{SignatureStripe, "", "/id", 3 * 24 * time.Hour,
		"Stripe retries an undelivered event for up to 3 days", true},
	{SignatureGitHub, idemwebhook.HeaderGitHubDelivery, "", 3 * 24 * time.Hour,
		"GitHub does not retry on its own, but a delivery of the past 3 days can be redelivered by hand or through its API, with the same X-GitHub-Delivery", false},
}

// SenderOf returns the sender defaults of signature scheme s.
func SenderOf(s string) (Sender, bool) {
	i := slices.IndexFunc(Senders, func(x Sender) bool { return x.Signature == s })
	if i < 0 {
		return Sender{}, false
	}
	return Senders[i], true
}

// Delivery is a webhook receiver's x-idempotency delivery, resolved: every field set.
type Delivery struct {
	Signature   string        // one of Signatures
	KeyHeader   string        // the delivery id's header; "" when KeyPointer is set
	KeyPointer  string        // the delivery id's JSON pointer into the body
	Tolerance   time.Duration // how far a signed timestamp may be from the clock; 0 for github
	RetryWindow time.Duration // how long the sender delivers an event again
}

// KeySource is the key's source as written: header:<Name> or body:<pointer>.
func (d *Delivery) KeySource() string {
	if d.KeyHeader != "" {
		return "header:" + d.KeyHeader
	}
	return "body:" + d.KeyPointer
}

// RawDelivery is x-idempotency.delivery as written. A signature written but refused by
// [ParseSignature] is left unset with its Pos, so that it is not reported missing too.
type RawDelivery struct {
	Signature   Field[string]
	KeyHeader   Field[string]
	KeyPointer  Field[string]
	Tolerance   Field[time.Duration]
	RetryWindow Field[time.Duration]
}

// DefaultTolerance is delivery.tolerance when it is not written.
const DefaultTolerance = idemwebhook.DefaultTolerance

// ParseSignature reads delivery.signature.
func ParseSignature(s string) (string, *Finding) {
	if slices.Contains(Signatures, s) {
		return s, nil
	}
	return "", finding(RuleDeliveryInvalid, "%q is not a signature scheme (use standard-webhooks, stripe or github)", s)
}

// ParseDeliveryKey reads delivery.key's one entry: header (a header name) or body (a JSON
// pointer to a member of the body).
func ParseDeliveryKey(kind, s string) (string, *Finding) {
	switch kind {
	case "header":
		if !IsToken(s) {
			return "", finding(RuleDeliveryInvalid, "%q is not a valid header name", s)
		}
	case "body":
		if msg := checkPointer(s); msg != "" {
			return "", finding(RuleDeliveryInvalid, "%q is not a JSON pointer: %s", s, strings.Replace(msg, "e.g. /requestTime", "e.g. /id", 1))
		}
	default:
		return "", finding(RuleDeliveryInvalid, "%q is not a key source (use {header: <Name>} or {body: <JSON pointer>})", kind)
	}
	return s, nil
}

// delivery resolves x-idempotency.delivery into p: the key is the delivery's id, and the
// request-side defaults that do not fit a sender give way to the receiver's (each only when the
// operation does not set the field itself): the scope is the operation (a sender has no tenant
// of the API's), the fingerprint is off (a sender may serialize an event anew on each attempt,
// and the signature already says who sent it), only 2xx answers are stored (any other answer is
// a failure the sender retries), and a duplicate waits for the first delivery up to the lease
// (a concurrent duplicate answered 409 would count as a failure against the endpoint).
func (r *resolver) delivery(p *Policy, raw *Raw, defs *Raw) {
	d, at := raw.Delivery.V, raw.Delivery.Pos
	out := &Delivery{}
	out.Signature = d.Signature.V
	sender, _ := SenderOf(out.Signature)
	if !d.Signature.Set && d.Signature.Pos.Line == 0 { // a signature written but refused was reported
		r.errorf(at, RuleDeliveryInvalid, "delivery", "names no signature scheme: a delivery is verified before its id is claimed, so an unsigned one cannot bind a key (set signature: standard-webhooks, stripe or github)")
	}
	switch {
	case d.KeyHeader.Set:
		out.KeyHeader = d.KeyHeader.V
	case d.KeyPointer.Set:
		out.KeyPointer = d.KeyPointer.V
	default:
		out.KeyHeader, out.KeyPointer = sender.KeyHeader, sender.KeyPointer
	}
	out.Tolerance, out.RetryWindow = DefaultTolerance, sender.RetryWindow
	if d.Tolerance.Set {
		out.Tolerance = d.Tolerance.V
		if d.Signature.Set && !sender.Timestamped {
			r.errorf(d.Tolerance.Pos, RuleDeliveryInvalid, "delivery.tolerance", "%s signs no timestamp, so there is nothing to bound (remove tolerance)", out.Signature)
		}
	}
	if !sender.Timestamped {
		out.Tolerance = 0
	}
	windowNote := sender.Source
	if d.RetryWindow.Set {
		out.RetryWindow, windowNote = d.RetryWindow.V, "as delivery.retryWindow says"
	}
	if raw.Key.Header.Set || raw.Key.From.Set {
		pos := raw.Key.Header.Pos
		if raw.Key.From.Set {
			pos = raw.Key.From.Pos
		}
		r.errorf(pos, RuleDeliveryInvalid, "key", "a webhook receiver's key is its delivery id, which delivery.key names (remove key.header and key.from)")
	}
	if out.Signature != "" && out.KeyHeader == "" && out.KeyPointer == "" {
		r.errorf(at, RuleDeliveryInvalid, "delivery.key", "names no delivery id (set key: {header: <Name>} or key: {body: <JSON pointer>})")
	}
	p.Delivery = out
	p.Key = Key{Header: out.KeyHeader, Required: true, MaxLength: MaxKeyLength}
	if !raw.Scope.Set {
		p.Scope = []ScopeItem{{Kind: ScopeOperation}}
	}
	if !raw.Fingerprint.Set && p.Storage != StorageMarker {
		p.NoFingerprint = true
		p.Exclude, p.ExcludeParams, p.Include, p.Unprinted = nil, nil, nil, nil
	}
	if !raw.Persist.Set {
		p.Persist = []string{"2xx"}
	}
	if !raw.Wait.Set {
		p.Wait = p.Lease
	}
	if out.RetryWindow > 0 && p.TTL < out.RetryWindow {
		ttlPos := at
		switch {
		case raw.TTL.Set:
			ttlPos = raw.TTL.Pos
		case defs != nil && defs.TTL.Set:
			ttlPos = defs.TTL.Pos
		}
		r.diags = append(r.diags, NewDiagnostic(ttlPos, RuleDeliveryTTLShort, r.route, fmt.Sprintf(
			"x-idempotency.ttl: %s is shorter than the sender's retry window (%s: %s): a delivery id forgotten before the sender's last redelivery runs that redelivery again (use ttl: %s or more)",
			FormatDuration(p.TTL), FormatDuration(out.RetryWindow), windowNote, FormatDuration(out.RetryWindow))))
		r.diags[len(r.diags)-1].Field = "ttl"
	}
}

// DetectSender says which signature scheme an operation's declared request headers show it
// receives deliveries of: Standard Webhooks (webhook-id with webhook-signature or
// webhook-timestamp), Stripe (Stripe-Signature) or GitHub (X-GitHub-Delivery or
// X-Hub-Signature-256); "" when none. annotate proposes a receiver's delivery from it.
func DetectSender(headers []string) string {
	has := func(name string) bool {
		return slices.ContainsFunc(headers, func(h string) bool { return strings.EqualFold(h, name) })
	}
	switch {
	case has(idemwebhook.HeaderWebhookID) && (has(idemwebhook.HeaderWebhookSignature) || has(idemwebhook.HeaderWebhookTimestamp)):
		return SignatureStandardWebhooks
	case has(idemwebhook.HeaderStripeSignature):
		return SignatureStripe
	case has(idemwebhook.HeaderGitHubDelivery) || has(idemwebhook.HeaderGitHubSignature):
		return SignatureGitHub
	}
	return ""
}
