// Package spec loads an OpenAPI document and turns its x-idempotency extensions into the typed
// model. It is the ONE place that parses x-idempotency; the generator and the linter both use it.
package spec

import (
	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/generator/model"
)

// Severity of a diagnostic.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Diagnostic is one finding, with its place in the file.
type Diagnostic struct {
	Pos       model.Position
	Severity  Severity
	Rule      string // stable rule id, e.g. "ttl-invalid"
	Operation string // "POST /v1/payments", or "" for document-level findings
	Message   string // says what is wrong and what to do, without position or operation
}

// String renders "file:line:col: POST /v1/payments: message".
func (d Diagnostic) String() string { panic("unimplemented") }

// LoadOpts tune Load; nil means defaults.
type LoadOpts struct {
	// AllowRemoteRefs lets $ref point at other hosts; refused by default.
	AllowRemoteRefs bool
}

// Spec is a loaded document.
type Spec struct {
	File  string
	Raw   []byte      // the file's bytes, for loading fresh copies (oapi-codegen mutates its input)
	Doc   *openapi3.T // as loaded by kin-openapi, unmodified
	Model *model.Document
	// Diagnostics holds every finding, errors and warnings, sorted by position.
	Diagnostics []Diagnostic
}

// HasErrors reports whether any diagnostic is an error.
func (s *Spec) HasErrors() bool { panic("unimplemented") }

// Load reads and parses path. The error is for a file that cannot be read or is not an OpenAPI 3
// document kin-openapi can load (it names the file and the cause); rule violations are
// Diagnostics, all of them, not an error.
func Load(path string, opts *LoadOpts) (*Spec, error) { panic("unimplemented") }

// LoadData is Load for bytes already in memory; path is used for messages and relative $refs.
func LoadData(path string, data []byte, opts *LoadOpts) (*Spec, error) { panic("unimplemented") }
