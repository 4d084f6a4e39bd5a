// Package spec loads an OpenAPI document and turns its x-idempotency extensions into the typed
// model. It is the one loader the generator, the linter and annotate use: it reads x-idempotency
// from YAML nodes, checks their YAML types, and leaves what every value means, and every rule, to
// package policy ([policy.Resolve] for x-idempotency's values, [policy.Lint] for the document
// around it).
//
// Loading has two halves. kin-openapi reads the document (local $refs resolved, remote ones
// refused unless allowed) and gives the operations, parameters, bodies and responses. The same
// bytes are parsed again, at the same time, into gopkg.in/yaml.v3 nodes, which carry line and
// column (by yaml.v3 itself, or for JSON by jsonNodes), and x-idempotency is read from those
// nodes, so every diagnostic points at the value it is about.
// The document is never validated as a whole: specs that oapi-codegen accepts must load here.
//
// Decisions the x-idempotency reference (docs/x-idempotency.md) records (each pinned by a golden case under testdata/):
//
//   - The document-level x-idempotency must be a mapping of defaults; true or false there is an
//     error (root-invalid), because "every operation is idempotent" is never what a reader of the
//     root expects, and marking operations one by one is what annotate does.
//   - A field set on an operation replaces the default whole; lists (scope, persist,
//     replayHeaders, fingerprint.exclude) are not concatenated. Within key, header and from are one
//     choice (the operation's, else the defaults', else Idempotency-Key), while required,
//     maxLength and pattern are inherited one by one.
//   - ttl and lease must be positive, wait zero or more; a "d" suffix counts days ("3d", "1d12h").
//     wait applies to both claim modes (with claim transaction it bounds how long a duplicate
//     blocks) and may not exceed the lease: a duplicate would otherwise still be waiting when the
//     first request's claim can be taken over.
//   - key.maxLength is 1..255: the default is also the ceiling, a longer key is a payload. A path
//     key is always required. A key or scope header matches a declared header parameter
//     case-insensitively (inline or via $ref, operation or path item), and the model carries the
//     declared spelling, so the generator finds oapi-codegen's field for it.
//   - fingerprint: false turns the reuse check off; it is an error with storage marker, which keeps
//     nothing else. Every body is fingerprinted as sent (JSON and forms canonically, multipart
//     part by part, anything else as bytes). exclude entries are RFC 6901 pointers into the body
//     (the empty pointer, the whole body, is refused), or header:<Name> (matched
//     case-insensitively) and query:<name> (matched exactly), which must name a parameter the
//     operation or its path item declares. path:<param> is refused: a path parameter names the
//     resource, so leaving it out would replay one resource's outcome for another. The key header
//     is refused too: it is never fingerprinted. With the fingerprint off, exclude is ignored
//     (also when inherited), and the generated code fingerprints the route alone, so any request
//     with the key replays while the same key on another operation is still key-reused.
//   - "A way to replay": storage reference needs a 2xx response with a body for Replay<Op> to
//     reload the resource into; storage marker needs a 2xx response (code or 2XX range) for
//     Replay<Op> to recompute.
//   - persist items are 2xx..5xx classes or codes 200..599, classes lower-cased; listing 408, 425
//     or 429 is an error (a 4xx class is fine: the runtime never stores those three).
//   - Warnings: x-idempotency on GET/HEAD/OPTIONS; a POST with no x-idempotency at all (an
//     explicit false is a deliberate opt-out and stays quiet); ttl shorter than the lease; a header
//     that looks like a key (any name containing "idempoten", or *-Request-Id except the tracing
//     header X-Request-Id) on an operation that does not use it as the key (skipped on safe methods
//     without a policy and on explicit opt-outs); an idempotent operation's own 409, which the
//     runtime's in-progress answer then shares, unless its description mentions "in-progress";
//     a header a stored response declares and replays never carry (storage response only:
//     Replay<Op> answers the others anew); an idempotent operation's own non-problem body on a
//     status the runtime answers with a problem, from the runtime's table (idemwire.ProblemStatus),
//     404 and 405 left out since they answer requests that reach no operation.
//   - Acknowledgements (x-idempotency-lint at the root or on an operation, and a config file's
//     lint key through [Spec.Acknowledge]) accept warnings only, each with a reason; one that
//     accepts nothing is a warning of its own, so none outlives what it was about.
//   - Operations are ordered by path, then GET PUT POST DELETE OPTIONS HEAD PATCH TRACE, then any
//     other method alphabetically. An operation reached through a path item $ref to another file
//     is read through kin-openapi; its diagnostics point at the path's key in this file.
package spec

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	pathpkg "path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	yamlv4 "go.yaml.in/yaml/v4"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
)

// Diagnostic is one finding, with its place in the file; the rules are package policy's.
type Diagnostic = policy.Diagnostic

// LoadOpts tune Load; nil means defaults.
type LoadOpts struct {
	// AllowRemoteRefs lets $ref point at other hosts; refused by default.
	AllowRemoteRefs bool
	// MaxBytes refuses a larger document before reading it; 0 means the number of bytes in the
	// environment variable IDEMGEN_MAX_SPEC_BYTES (MaxBytesEnv) when set, else DefaultMaxBytes
	// (32 MiB); negative means no limit. MaxDepth and MaxRefChain bound every document.
	MaxBytes int64
	// Override, when set, replaces the fields it sets in every operation's x-idempotency, over
	// the operation's own and the document's defaults (a config file's override key, see
	// [ParseOverride]). Operations without x-idempotency stay without.
	Override *policy.Raw
}

// Spec is a loaded document.
type Spec struct {
	File  string
	Raw   []byte      // the file's bytes, for loading fresh copies (oapi-codegen mutates its input)
	Doc   *openapi3.T // as loaded by kin-openapi (NewLoader), unmodified until generated from
	Model *model.Document
	// Defaults is the document's root x-idempotency as written, nil when absent or not a
	// mapping: what an operation marked later would inherit.
	Defaults *policy.Raw
	// Diagnostics holds every finding, errors and warnings, sorted by position, except the
	// warnings an acknowledgement accepted.
	Diagnostics []Diagnostic
	// Acknowledged holds the warnings an acknowledgement accepted (the spec's own
	// x-idempotency-lint, or a config file's through Acknowledge), sorted by position.
	Acknowledged []Acknowledged
}

// HasErrors reports whether any diagnostic is an error.
func (s *Spec) HasErrors() bool {
	for _, d := range s.Diagnostics {
		if d.Severity == policy.SeverityError {
			return true
		}
	}
	return false
}

// Errors returns the error diagnostics, in order.
func (s *Spec) Errors() []Diagnostic {
	var out []Diagnostic
	for _, d := range s.Diagnostics {
		if d.Severity == policy.SeverityError {
			out = append(out, d)
		}
	}
	return out
}

// Load reads and parses path. The error is for a file that cannot be read or is not an OpenAPI 3
// document kin-openapi can load (it names the file and the cause); rule violations are
// Diagnostics, all of them, not an error.
func Load(path string, opts *LoadOpts) (*Spec, error) {
	data, err := ReadFile(path, opts.maxBytes())
	if err != nil {
		if re := (*ReadError)(nil); errors.As(err, &re) {
			return nil, fmt.Errorf("%s: cannot read the spec: %w", path, re.Err)
		}
		return nil, err
	}
	return LoadData(path, data, opts)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// RemoteRefError is returned (wrapped) when the document $refs another host and remote refs are
// not allowed.
type RemoteRefError struct{ URL string }

func (e *RemoteRefError) Error() string {
	return fmt.Sprintf("remote $ref %q refused: copy the referenced document next to the spec and $ref it by relative path, or allow remote refs explicitly (--allow-remote-refs)", e.URL)
}

// LoadData is Load for bytes already in memory; path is used for messages and relative $refs.
func LoadData(path string, data []byte, opts *LoadOpts) (*Spec, error) {
	if opts == nil {
		opts = &LoadOpts{}
	}
	// The bounds come first (bounds.go): size and nesting before any parser runs, the $ref
	// chains on the node tree before kin-openapi follows them. A document that does not parse is
	// reported by the tree's error, whatever kin-openapi would say.
	tree, err := checkBounds(path, data, opts)
	if err != nil {
		return nil, err
	}
	doc, err := NewLoader(opts).LoadFromDataWithPath(data, &url.URL{Path: filepath.ToSlash(path)})
	if err != nil {
		var rr *RemoteRefError
		if errors.As(err, &rr) {
			return nil, fmt.Errorf("%s: %w", path, rr)
		}
		return nil, loadError(path, err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		if _, v := lookup(tree, "swagger"); v != nil {
			return nil, fmt.Errorf("%s: this is a Swagger %s document; idemgen reads OpenAPI 3.0 and 3.1 (convert it first)", path, v.Value)
		}
		return nil, fmt.Errorf("%s: not an OpenAPI 3 document: the top-level \"openapi\" field is %q, want 3.0.x or 3.1.x", path, doc.OpenAPI)
	}
	s := &Spec{File: path, Raw: data, Doc: doc}
	b := &builder{file: path, tree: tree, doc: doc, override: opts.Override}
	s.Model = b.build()
	s.Defaults = b.defs
	s.Diagnostics = b.diags
	s.Acknowledge(b.acks)
	return s, nil
}

// NewLoader is the one OpenAPI loader idemgen uses: it reads local $refs relative to the spec
// and refuses http(s) ones (RemoteRefError) unless allowed, with a bounded wait when it follows
// them. A
// custom ReadFromURIFunc owns the whole access policy (kin-openapi then ignores
// IsExternalRefsAllowed), which is what lets local files through while holding remote hosts back.
func NewLoader(opts *LoadOpts) *openapi3.Loader {
	if opts == nil {
		opts = &LoadOpts{}
	}
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = true
	// oapi-codegen orders route registration by source line, so a document it generates from
	// keeps its origins.
	l.IncludeOrigin = true
	remote := openapi3.ReadFromHTTP(&http.Client{Timeout: 30 * time.Second})
	limit := opts.maxBytes()
	l.ReadFromURIFunc = func(loader *openapi3.Loader, u *url.URL) ([]byte, error) {
		if u.Host != "" || (u.Scheme != "" && u.Scheme != "file") {
			if !opts.AllowRemoteRefs {
				return nil, &RemoteRefError{URL: u.String()}
			}
			return remote(loader, u)
		}
		// A file a $ref names is held to the spec's own bounds: a regular file within the size
		// limit, of a nesting MaxDepth bounds (kin-openapi's YAML parser recurses per level).
		name := pathpkg.Clean(filepath.FromSlash(u.Path))
		data, err := ReadFile(name, limit)
		if err != nil {
			return nil, err
		}
		if err := depthError(name, data); err != nil {
			return nil, err
		}
		return data, nil
	}
	return l
}

// syntaxError describes a document yaml.v3 rejected. It re-reads it with yaml v4 (the YAML
// library kin-openapi itself uses), whose errors carry the line and column where the problem was
// found and the construct it was in: yaml.v3 names only the line of the enclosing construct, and
// counts it from zero for parser errors, so an unclosed "[" on line 8 was reported on line 7.
func syntaxError(path string, data []byte, v3err error) error {
	var n yamlv4.Node
	var le *yamlv4.LoadError
	if err := yamlv4.Unmarshal(data, &n); errors.As(err, &le) && le.Mark.Line > 0 {
		line, col := le.Mark.Line, le.Mark.Column
		// A problem found at the end of input is placed at the end of the last line with text.
		if text := strings.TrimRight(string(data), "\r\n"); line > strings.Count(text, "\n")+1 {
			line = strings.Count(text, "\n") + 1
			col = len(text) - strings.LastIndex(text, "\n")
		}
		msg := le.Message
		if le.ContextMsg != "" && le.ContextMark.Line > 0 && le.ContextMark.Line <= line {
			construct := strings.TrimPrefix(strings.TrimPrefix(le.ContextMsg, "while parsing "), "while scanning ")
			msg += fmt.Sprintf(" (in %s that starts at %d:%d)", construct, le.ContextMark.Line, le.ContextMark.Column)
		}
		return fmt.Errorf("%s:%d:%d: not valid YAML or JSON: %s", path, line, col, msg)
	}
	msg := strings.TrimPrefix(v3err.Error(), "yaml: ")
	return fmt.Errorf("%s: not valid YAML or JSON: %s", path, msg)
}

// loadError turns kin-openapi's failure into one readable error. Its YAML decoding reports every
// construct error (yaml v4's LoadErrors, each with its position); the first one, placed at its
// line and column, says what to fix, and the count says how many more places share the problem.
func loadError(path string, err error) error {
	line, col, msg := LoadFailure(err)
	if line > 0 {
		path = fmt.Sprintf("%s:%d:%d", path, line, col)
	}
	return fmt.Errorf("%s: kin-openapi cannot load it as an OpenAPI 3 document: %s; fix the document (or check it with an OpenAPI validator)", path, msg)
}

// LoadFailure reads a NewLoader error: the position of the first construct error (0 when the
// error has none, a missing $ref file say) and one line saying what it is, with the count of the
// others that share the problem.
func LoadFailure(err error) (line, col int, msg string) {
	var les *yamlv4.LoadErrors
	if errors.As(err, &les) && len(les.Errors) > 0 && les.Errors[0].Mark.Line > 0 {
		first := les.Errors[0]
		msg = first.Message
		if len(les.Errors) > 1 {
			msg += fmt.Sprintf(" (and %d more like it)", len(les.Errors)-1)
		}
		return first.Mark.Line, first.Mark.Column, msg
	}
	return 0, 0, err.Error()
}

func sortDiagnostics(ds []Diagnostic) {
	sort.SliceStable(ds, func(i, j int) bool { return diagLess(ds[i], ds[j]) })
}

// diagLess orders diagnostics by file, line, column, operation and message.
func diagLess(a, b Diagnostic) bool {
	if a.Pos.File != b.Pos.File {
		return a.Pos.File < b.Pos.File
	}
	if a.Pos.Line != b.Pos.Line {
		return a.Pos.Line < b.Pos.Line
	}
	if a.Pos.Col != b.Pos.Col {
		return a.Pos.Col < b.Pos.Col
	}
	if a.Operation != b.Operation {
		return a.Operation < b.Operation
	}
	return a.Message < b.Message
}
