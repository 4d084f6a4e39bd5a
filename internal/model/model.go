// Package model is the generator's typed intermediate representation: operations and their
// resolved idempotency policies, with every default applied and every rule checked. Templates and
// the linter see only these plain structs, never kin-openapi types.
package model

import "time"

// Position is a place in a spec file; Line and Col are 1-based.
type Position struct {
	File string
	Line int
	Col  int
}

// Document is everything the generator and linter need from one spec.
type Document struct {
	File       string
	Operations []*Operation // every operation, sorted by path, then GET PUT POST DELETE OPTIONS HEAD PATCH TRACE, then other methods
}

// Idempotent returns the operations that carry a policy, in the order of Operations.
func (d *Document) Idempotent() []*Operation {
	var out []*Operation
	for _, op := range d.Operations {
		if op.Policy != nil {
			out = append(out, op)
		}
	}
	return out
}

// Operation is one OpenAPI operation.
type Operation struct {
	ID     string // operationId exactly as written (oapi-codegen rewrites it; keep the raw one)
	Method string // upper case: POST
	Path   string // /v1/payments/{payment_id}
	Pos    Position
	// Params lists declared parameters (operation and path item), for fingerprints and scope.
	Params []Param
	// Body is how the request body can be fingerprinted; BodyNone when there is none.
	Body BodyKind
	// BodyTypes are the request body's media types as declared, sorted.
	BodyTypes []string
	Policy    *Policy // nil when not idempotent
}

// Route is "POST /v1/payments", the form used in messages and fingerprints.
func (o *Operation) Route() string { return o.Method + " " + o.Path }

// Param is a declared parameter.
type Param struct {
	Name     string
	In       string // path, query, header, cookie
	Required bool
	Pos      Position // the parameter's name (or its $ref) in the spec
}

// BodyKind classifies a request body for fingerprinting.
type BodyKind int

const (
	BodyNone      BodyKind = iota
	BodyJSON               // canonical JSON of the bytes sent
	BodyForm               // form fields sorted by name
	BodyMultipart          // part by part, without the boundary
	BodyBytes              // text, binary, or several media types: the bytes as sent
)

// Storage modes.
const (
	StorageResponse  = "response"
	StorageReference = "reference"
	StorageMarker    = "marker"
)

// Claim modes.
const (
	ClaimLease       = "lease"
	ClaimTransaction = "transaction"
)

// Policy is an operation's x-idempotency with the document defaults and built-in defaults applied.
type Policy struct {
	Pos            Position // where x-idempotency is written
	Storage        string
	TTL            time.Duration
	Lease          time.Duration
	Wait           time.Duration
	Timeout        time.Duration // bound on the handler's time (then rolled back, key released); the lease unless set
	Claim          string
	MismatchStatus int
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
	// replayed, not answered with mismatchStatus. Never set for storage marker.
	NoFingerprint bool
	ReplayHeaders []string // per-operation additions to the replay header allow-list
}

// ParamRef names one declared parameter.
type ParamRef struct {
	In   string // "header" or "query"
	Name string // as the spec declares it
}

// ScopeItem is one element of a policy's scope.
type ScopeItem struct {
	Kind string // "tenant", "operation", "header", "path"
	Name string // header (spelled as the parameter is declared) or path parameter name; empty for tenant/operation
}

// Key says where the idempotency key comes from.
type Key struct {
	// Header is the key header's name as the spec declares the parameter (svix writes
	// idempotency-key), or "" when the key is a path parameter.
	Header    string
	PathParam string // set for from: path:<param>
	Required  bool
	MaxLength int
	Pattern   string // optional regular expression (RE2)
}
