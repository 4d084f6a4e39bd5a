// Package policy owns the x-idempotency language: its vocabulary (storage, claim mode, scope
// items, persist sets, mismatch statuses, key sources), its defaults, the parser of every value,
// the rule table, [Resolve], which turns a policy as written for one operation into the typed
// [Policy] every command uses, with a [Diagnostic] for each rule it breaks, and [Lint], the
// document-level rules (what the document declares around x-idempotency: a POST without it, a
// key-like header it does not use, responses a replay or a problem would contradict). Every
// rule lives here.
//
// Callers only read and write: internal/spec reads x-idempotency from YAML nodes into a [Raw]
// and the document's facts into a [LintInput], annotate builds a [Raw] from its flags and the
// document's defaults, and the generator renders the resolved [Policy]. None of them decides
// what a value means or whether a rule is broken.
package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Position is a place in a spec file; Line and Col are 1-based.
type Position struct {
	File string
	Line int
	Col  int
}

// StorageMode is what a policy stores of an answer, as x-idempotency's storage names it; the
// generated code turns it into the runtime's idemhttp.Storage.
type StorageMode string

const (
	StorageResponse  StorageMode = "response"  // status, allow-listed headers and body
	StorageReference StorageMode = "reference" // status and a reference a replay reloads the resource from
	StorageMarker    StorageMode = "marker"    // status only; a replay recomputes the answer
)

// Storages lists every storage mode, in the order messages name them.
var Storages = []StorageMode{StorageResponse, StorageReference, StorageMarker}

// ClaimMode is how a request claims its key, as x-idempotency's claim names it; the generated
// code turns it into the runtime's idem.ClaimMode (idem.Claim is a claim held on a key).
type ClaimMode string

const (
	ClaimLease       ClaimMode = "lease"       // a leased row, renewed while the handler runs
	ClaimTransaction ClaimMode = "transaction" // a row lock held by the handler's transaction
)

// Claims lists every claim mode, in the order messages name them.
var Claims = []ClaimMode{ClaimLease, ClaimTransaction}

// Scope item kinds.
const (
	ScopeTenant    = "tenant"    // the request's tenant (idem.Config.Tenant)
	ScopeOperation = "operation" // the operation id
	ScopeHeader    = "header"    // a declared header parameter's value
	ScopePath      = "path"      // a path parameter's value
)

// ScopeItem is one element of a policy's scope.
type ScopeItem struct {
	Kind string // ScopeTenant, ScopeOperation, ScopeHeader or ScopePath
	Name string // header (spelled as the parameter is declared) or path parameter name; empty for tenant/operation
}

// String is the item as written: tenant, operation, header:<Name>, path:<param>.
func (s ScopeItem) String() string {
	if s.Name == "" {
		return s.Kind
	}
	return s.Kind + ":" + s.Name
}

// MismatchStatuses are the statuses a reused key may be answered with, the default first.
var MismatchStatuses = []int{422, 409, 400}

// Built-in defaults, applied under a document's root x-idempotency defaults. They are the
// runtime's own, so a generated policy and a zero runtime field mean the same.
const (
	DefaultStorage        = StorageResponse
	DefaultClaim          = ClaimLease
	DefaultTTL            = idem.DefaultTTL
	DefaultLease          = idem.DefaultLease
	DefaultWait           = time.Duration(0)
	DefaultMismatchStatus = idemhttp.DefaultMismatchStatus
	DefaultKeyHeader      = idemhttp.DefaultKeyHeader
	// MaxKeyLength is both the default and the ceiling of key.maxLength: a longer "key" is a
	// payload, not an identifier, and bounding it bounds the key column and its index.
	MaxKeyLength = idemhttp.DefaultMaxKeyLength
)

// DefaultScope is the scope when none is written.
func DefaultScope() []ScopeItem {
	return []ScopeItem{{Kind: ScopeTenant}, {Kind: ScopeOperation}}
}

// DefaultPersist is the persist set when none is written.
func DefaultPersist() []string { return slices.Clone(idemwire.DefaultPersist) }

// Policy is an operation's x-idempotency with the document defaults and built-in defaults
// applied and every rule checked: what the generator renders, and what any other consumer (a
// generated client, say) reads from the model.
type Policy struct {
	Pos            Position // where x-idempotency is written
	Storage        StorageMode
	TTL            time.Duration
	Lease          time.Duration
	Wait           time.Duration
	Timeout        time.Duration // bound on the handler's time (then rolled back, key released); the lease unless set
	Claim          ClaimMode
	MismatchStatus int      // one of MismatchStatuses
	Persist        []string // "2xx", "404", … as written (classes lower-cased), validated
	Scope          []ScopeItem
	Key            Key
	Exclude        []string // fingerprint.exclude JSON pointers into the body
	// ExcludeParams are the fingerprint.exclude entries header:<Name> and query:<name>: declared
	// parameters left out of the fingerprint (a request id, a timestamp, a signature), so a retry
	// that only changes them is replayed. Header names carry the declared spelling. Never a path
	// parameter or the key header; nil when there are none.
	ExcludeParams []ParamRef
	// NoFingerprint is set by fingerprint: false: the same key with a different request is then
	// replayed, not answered with MismatchStatus. Never set for storage marker.
	NoFingerprint bool
	ReplayHeaders []string // per-operation additions to the replay header allow-list
	// Include are the fingerprint.include headers: declared headers the default fingerprint
	// leaves out ([VolatileHeader]) that this policy fingerprints all the same.
	Include []ParamRef
	// Unprinted are the declared header parameters the fingerprint leaves out by default
	// ([VolatileHeader]): not the key, not excluded or included explicitly. Nil with the
	// fingerprint off or without an operation.
	Unprinted []Unprinted
	// EchoHeaders are response headers every answer takes from the current request (FAPI's
	// x-fapi-interaction-id): a replay never carries the stored one, and refusals carry it too.
	EchoHeaders []string
	// Renderer is RendererProblem (the runtime answers refusals as RFC 9457 problems) or
	// RendererCustom (the application configures an idemhttp.Renderer that answers them in the
	// API's own error format, so lint does not ask the spec's error responses to be problems).
	Renderer string
	// History (x-idempotency history) keeps a durable history of each key: claims, takeovers,
	// completions, releases, replays, provider calls (idem.DoParams.History). Off by default: it
	// costs a write per first execution. Always set when UncertainOnLoss is.
	History bool
	// UncertainOnLoss (x-idempotency uncertainOnLoss) declares that the operation's provider
	// calls cannot be safely repeated: a claim lost after the handler asked for a provider key
	// turns the key uncertain instead of running the handler again
	// (idem.DoParams.UncertainOnLoss). Only with ClaimLease (rule uncertain-needs-lease).
	UncertainOnLoss bool
	// Delivery (x-idempotency delivery) makes the operation a webhook receiver: its key is the
	// delivery's id, read after the delivery's signature was verified (webhook.go). Nil for an
	// API operation.
	Delivery *Delivery
}

// Renderer values: who writes the operation's refusals.
const (
	RendererProblem = "problem" // RFC 9457 problems, the default
	RendererCustom  = "custom"  // the API's own format, through an idemhttp.Renderer
)

// ScopesTenant reports whether the scope includes the tenant.
func (p *Policy) ScopesTenant() bool {
	return slices.ContainsFunc(p.Scope, func(it ScopeItem) bool { return it.Kind == ScopeTenant })
}

// ParamRef names one declared parameter.
type ParamRef struct {
	In   string // "header" or "query"
	Name string // as the spec declares it
}

// Key says where the idempotency key comes from: exactly one of Header and PathParam is set.
type Key struct {
	// Header is the key header's name as the spec declares the parameter (svix writes
	// idempotency-key), or "" when the key is a path parameter.
	Header    string
	PathParam string // set for from: path:<param>
	Required  bool   // always true for a path key
	MaxLength int    // 1..MaxKeyLength
	Pattern   string // optional regular expression (RE2)
}

// Param is a declared parameter of an operation or its path item.
type Param struct {
	Name     string
	In       string // path, query, header, cookie
	Required bool
	Pos      Position // the parameter's name (or its $ref) in the spec
	// MaxLength and Pattern are the parameter's schema's maxLength (0 when it has none) and
	// pattern ("" when none), at MaxLengthPos and PatternPos: for the key header, the spec's own
	// rules for a key, which the policy takes over.
	MaxLength    int
	Pattern      string
	MaxLengthPos Position
	PatternPos   Position
}

// Operation is what [Resolve] needs to know of the operation a policy is for.
type Operation struct {
	Method    string // upper case
	Path      string
	Params    []Param // operation and path item parameters, merged
	Responses Responses
}

// Responses is what an operation declares of its success responses.
type Responses struct {
	// AnySuccess says a 2xx response (a code or the 2XX range) is declared, SuccessBody that one
	// of them has a body, and Unbounded names the first place in a success body that can grow
	// without bound ("" when none).
	AnySuccess, SuccessBody bool
	Unbounded               string
}

// Route is "POST /v1/payments", the form used in messages and fingerprints.
func (o *Operation) Route() string { return o.Method + " " + o.Path }

// FindParam returns the declared parameter in at name: header names compare
// case-insensitively, the others exactly.
func FindParam(ps []Param, in, name string) (Param, bool) {
	for _, p := range ps {
		if SameParam(p, Param{In: in, Name: name}) {
			return p, true
		}
	}
	return Param{}, false
}

// SameParam reports whether a and b are the same parameter (location and name; header names
// case-insensitively).
func SameParam(a, b Param) bool {
	if a.In != b.In {
		return false
	}
	if a.In == "header" {
		return equalFold(a.Name, b.Name)
	}
	return a.Name == b.Name
}

// StoresStatus reports whether a response the spec declares under status ("201", "2XX",
// "default") can be an answer the runtime stores for this policy: a code in Persist (the
// runtime's DefaultPersist when it is empty, as the runtime reads it), a range with a member in
// it, or default while anything is stored. The generator replays the headers such a response
// declares, and lint checks them.
func (p *Policy) StoresStatus(status string) bool {
	list := p.Persist
	if len(list) == 0 {
		list = idemwire.DefaultPersist
	}
	persist, _ := idemwire.ParseStatuses(list...) // validated when parsed
	if code, err := strconv.Atoi(status); err == nil {
		return persist.Contains(code)
	}
	if len(status) == 3 && strings.EqualFold(status[1:], "XX") && status[0] >= '1' && status[0] <= '5' {
		base := int(status[0]-'0') * 100
		for code := base; code < base+100; code++ {
			if persist.Contains(code) {
				return true
			}
		}
		return false
	}
	return strings.EqualFold(status, "default") && !persist.IsEmpty()
}
