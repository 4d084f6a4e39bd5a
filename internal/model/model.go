// Package model is the generator's typed intermediate representation: operations and their
// resolved idempotency policies ([policy.Policy], with every default applied and every rule
// checked). Templates and the linter see only these plain structs, never kin-openapi types.
package model

import (
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Position is a place in a spec file; Line and Col are 1-based.
type Position = policy.Position

// Param is a declared parameter.
type Param = policy.Param

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
	// Responses is what the operation declares of its success responses, for the rules that
	// need a way to replay.
	Responses policy.Responses
	// ResponseHeaders are the headers every response declares (responses.<status>.headers), by
	// status, then name; the generator replays those of the statuses a policy stores.
	ResponseHeaders []ResponseHeader
	Policy          *policy.Policy // nil when not idempotent
}

// ResponseHeader is one header a response declares.
type ResponseHeader = policy.ResponseHeader

// Input is what [policy.Resolve] needs of the operation.
func (o *Operation) Input() *policy.Operation {
	return &policy.Operation{Method: o.Method, Path: o.Path, Params: o.Params, Responses: o.Responses}
}

// Route is "POST /v1/payments", the form used in messages and fingerprints.
func (o *Operation) Route() string { return o.Method + " " + o.Path }

// BodyKind classifies a request body for fingerprinting.
type BodyKind int

const (
	BodyNone      BodyKind = iota
	BodyJSON               // canonical JSON of the bytes sent
	BodyForm               // form fields sorted by name
	BodyMultipart          // part by part, without the boundary
	BodyBytes              // text, binary, or several media types: the bytes as sent
)

// ClassifyMediaType says how a request body of media type mt is fingerprinted: by the runtime's
// own rule for the Content-Type a request arrives with (idemwire.ClassifyMediaType, which
// idem.CanonicalBody reads too): JSON (application/json and *+json) canonically, forms field by
// field, multipart part by part, and anything else as bytes.
func ClassifyMediaType(mt string) BodyKind {
	switch idemwire.ClassifyMediaType(mt) {
	case idemwire.MediaJSON:
		return BodyJSON
	case idemwire.MediaForm:
		return BodyForm
	case idemwire.MediaMultipart:
		return BodyMultipart
	}
	return BodyBytes
}
