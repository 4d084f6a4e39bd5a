package policy

import "strings"

// The default fingerprint covers every declared parameter except the headers an honest retry
// changes: a client that retries with a refreshed access token, a fresh signature (PS256 and
// other randomised schemes sign the same request differently each time) or a new interaction id
// sends the same request, and fingerprinting those headers would answer it key-reused. This
// file is the one place that rule lives: the generator leaves these headers out, annotate says
// which it left out, and lint warns when fingerprint.include puts one back.

// VolatileKind says why a header is left out of the default fingerprint.
type VolatileKind string

const (
	VolatileCredential  VolatileKind = "credential"  // Authorization, Cookie, an API key
	VolatileSignature   VolatileKind = "signature"   // a signature over the request
	VolatileCorrelation VolatileKind = "correlation" // a per-attempt request, trace or interaction id
	VolatileAttempt     VolatileKind = "per-attempt" // the attempt's time or the client's address and agent
)

// volatileExact are header names (lower case) left out of the default fingerprint by name.
var volatileExact = map[string]VolatileKind{
	"authorization":       VolatileCredential,
	"proxy-authorization": VolatileCredential,
	"cookie":              VolatileCredential,
	"x-api-key":           VolatileCredential,
	"api-key":             VolatileCredential,

	"signature":       VolatileSignature,
	"signature-input": VolatileSignature,

	"traceparent":                VolatileCorrelation,
	"tracestate":                 VolatileCorrelation,
	"baggage":                    VolatileCorrelation,
	"b3":                         VolatileCorrelation,
	"request-id":                 VolatileCorrelation,
	"correlation-id":             VolatileCorrelation,
	"x-amzn-trace-id":            VolatileCorrelation,
	"x-cloud-trace-context":      VolatileCorrelation,
	"x-fapi-auth-date":           VolatileAttempt,
	"x-fapi-customer-ip-address": VolatileAttempt,
	"x-customer-user-agent":      VolatileAttempt,
	"user-agent":                 VolatileAttempt,
	"date":                       VolatileAttempt,
	"x-forwarded-for":            VolatileAttempt,
	"forwarded":                  VolatileAttempt,
}

// volatileSuffixes and volatilePrefixes are the name patterns (lower case) left out of the
// default fingerprint: *-signature, *-interaction-id, *-request-id, *-correlation-id,
// *-trace-id, *-timestamp, x-b3-*.
var (
	volatileSuffixes = []struct {
		suffix string
		kind   VolatileKind
	}{
		{"-signature", VolatileSignature},
		{"-interaction-id", VolatileCorrelation},
		{"-request-id", VolatileCorrelation},
		{"-correlation-id", VolatileCorrelation},
		{"-trace-id", VolatileCorrelation},
		{"-timestamp", VolatileAttempt},
	}
	volatilePrefixes = []struct {
		prefix string
		kind   VolatileKind
	}{
		{"x-b3-", VolatileCorrelation},
	}
)

// VolatileHeader says why header name is left out of the default fingerprint, or "" when it is
// fingerprinted: credentials (Authorization, Proxy-Authorization, Cookie, X-Api-Key), signatures
// (Signature, Signature-Input, *-Signature), correlation ids (Traceparent, Tracestate, Baggage,
// B3, X-B3-*, Request-Id, *-Request-Id, *-Interaction-Id, *-Correlation-Id, *-Trace-Id) and
// per-attempt values (Date, User-Agent, X-Forwarded-For, Forwarded, X-Fapi-Auth-Date,
// X-Fapi-Customer-Ip-Address, X-Customer-User-Agent, *-Timestamp). Names compare
// case-insensitively.
//
// A vendor's request id that is the operation's idempotency key (PayPal-Request-Id) is the key,
// which is never fingerprinted anyway.
func VolatileHeader(name string) VolatileKind {
	l := strings.ToLower(name)
	if k, ok := volatileExact[l]; ok {
		return k
	}
	for _, s := range volatileSuffixes {
		if strings.HasSuffix(l, s.suffix) {
			return s.kind
		}
	}
	for _, p := range volatilePrefixes {
		if strings.HasPrefix(l, p.prefix) {
			return p.kind
		}
	}
	return ""
}

// Why is the reason a header of kind k is left out of the default fingerprint, for messages.
func (k VolatileKind) Why() string {
	switch k {
	case VolatileCredential:
		return "a credential, which a client refreshes between attempts"
	case VolatileSignature:
		return "a signature, which a client computes anew for each attempt (randomised schemes such as PS256 never sign twice alike)"
	case VolatileCorrelation:
		return "a correlation id, new for each attempt"
	case VolatileAttempt:
		return "a value of the attempt (its time, the client's address or agent), not of the request"
	}
	return ""
}

// Unprinted is a declared header parameter the default fingerprint leaves out.
type Unprinted struct {
	Name string // as declared
	Kind VolatileKind
}
