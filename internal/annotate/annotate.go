// Package annotate adds x-idempotency to the state-changing operations of an existing OpenAPI
// document. It edits the document's own text: the additions are spliced into the original bytes,
// so comments, key order, quoting, anchors and indentation elsewhere stay byte for byte, and a
// review of the change shows only what was added. Running it again on its output changes nothing.
package annotate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// Options choose the operations and the policy written for them. Empty fields mean "the
// document's default": only values that differ from it are written.
type Options struct {
	// Methods are the HTTP methods to annotate, lower or upper case; nil means POST and PATCH.
	// When Operations is set and Methods is nil, the named operations are taken whatever their
	// method.
	Methods []string
	// Operations, when set, are the only operations annotated: operationIds or "POST /path".
	Operations []string
	// Exclude names operations (operationIds or "POST /path") to leave alone.
	Exclude []string

	Storage        string   // response, reference or marker
	TTL            string   // Go duration, or days: 3d
	Lease          string   // Go duration
	Wait           string   // Go duration, zero or more
	Claim          string   // lease or transaction
	Scope          []string // tenant, operation, header:<Name>, path:<param>; nil: see Result.Scopes
	MismatchStatus int      // 400, 409 or 422; 0 means the default

	NoKeyParam       bool // do not declare the key header parameter
	NoProblems       bool // do not add the 400/409/422/503 problem responses
	NoReplayedHeader bool // do not document Idempotent-Replayed on 2xx responses
}

// Skip is an operation that was selected but left alone.
type Skip struct {
	File   string
	Line   int
	Col    int
	Route  string // POST /v1/files
	Reason string
}

func (s Skip) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: not annotated: %s", s.File, s.Line, s.Col, s.Route, s.Reason)
}

// ScopeChoice is a scope annotate chose, because neither the options nor the document's defaults
// set one: [tenant, operation] for operations that are authenticated or declare a tenant header,
// and [operation] for the others, so that a single-tenant API works with idem.NewStore(pool, nil)
// while an API with tenants keeps their keys apart.
type ScopeChoice struct {
	File    string
	Scope   []string
	Routes  []string // the operations that got it, in document order
	Schemes []string // the security schemes that authenticate them
	Headers []string // the tenant headers they declare
}

func (c ScopeChoice) String() string {
	ops := fmt.Sprintf("%d operation(s)", len(c.Routes))
	if len(c.Routes) <= 3 {
		ops += " (" + strings.Join(c.Routes, ", ") + ")"
	}
	head := fmt.Sprintf("%s: scope [%s] for %s", c.File, strings.Join(c.Scope, ", "), ops)
	if !slices.Contains(c.Scope, "tenant") {
		return head + ": they are not authenticated and declare no tenant header, so all callers share one key space " +
			"and the server needs no idem.Config.Tenant (pass --scope tenant,operation if callers are tenants)"
	}
	var why []string
	if len(c.Schemes) > 0 {
		why = append(why, "they are authenticated (security: "+strings.Join(c.Schemes, ", ")+")")
	}
	if len(c.Headers) > 0 {
		why = append(why, "they declare a tenant header ("+strings.Join(c.Headers, ", ")+")")
	}
	return head + ": " + strings.Join(why, " and ") + ", so each tenant has its own keys and the server needs " +
		"idem.Config.Tenant to say whose request it is (pass --scope operation if there is only one tenant)"
}

// Kept is an error response of the operation's own that annotate left in place on a status the
// runtime also answers with an application/problem+json problem: clients then get either body on
// that status, and lint warns about it (error-response-not-problem) until the response declares
// both or the warning is acknowledged.
type Kept struct {
	File      string
	Line, Col int    // the status key
	Route     string // POST /v1/payments
	Status    int
	Declared  string   // what the response declares: "schema Error (application/json)"
	Codes     []string // the runtime's problem codes on this status for this operation
}

func (k Kept) String() string {
	return fmt.Sprintf("%s:%d:%d: %s: responses.%d: kept your %s; the runtime answers application/problem+json with %s on this status (declare application/problem+json beside it, e.g. with the %s schema, so clients expect both)",
		k.File, k.Line, k.Col, k.Route, k.Status, k.Declared, policy.CodesPhrase(k.Codes), ProblemSchemaName)
}

// Result is the annotated document.
type Result struct {
	Output    []byte
	Annotated []string // routes that received x-idempotency, in document order
	Skipped   []Skip
	// Scopes says which scope annotate chose for which operations, when it chose (no --scope and
	// no scope in the document's defaults); [tenant, operation] first.
	Scopes []ScopeChoice
	// Kept lists the operations' own error responses left in place on statuses the runtime also
	// answers with a problem, in document order. Empty when the document's x-idempotency says
	// renderer: custom: refusals then take the spec's own error format.
	Kept []Kept
	// KeyPatterns lists the key header patterns that are not RE2, one for each pattern, with the
	// operations annotated although generate refuses them until the document says which RE2
	// pattern the server enforces.
	KeyPatterns []KeyPattern
	// RefusalsUndeclared lists the annotated operations whose refusal statuses annotate left
	// undeclared: the document says renderer: custom and has no error body of its own.
	RefusalsUndeclared []string
	// Unprinted lists, for each annotated operation that declares any, the headers its
	// fingerprint leaves out by default (credentials, signatures, correlation ids), in document
	// order.
	Unprinted []Unprinted
}

// Unprinted is the declared headers an annotated operation's fingerprint leaves out.
type Unprinted struct {
	Route   string
	Headers []policy.Unprinted
}

// Changed reports whether the output differs from the input.
func (r *Result) Changed() bool { return len(r.Annotated) > 0 }

// Incomplete reports that the result needs a person before generate accepts it: an operation
// was left out, or a key pattern must be written in RE2.
func (r *Result) Incomplete() bool { return len(r.Skipped) > 0 || len(r.KeyPatterns) > 0 }

// KeyPattern is a key header parameter's schema pattern that Go's regexp cannot compile (a
// look-ahead, say): the operations whose key header it is were annotated all the same, and
// generate refuses them until x-idempotency.key.pattern gives the RE2 pattern the server is to
// enforce.
type KeyPattern struct {
	File      string
	Line, Col int // the pattern
	Header    string
	Pattern   string
	Why       string   // what Go's regexp says of it
	RE2       string   // the same keys in RE2, "" when idemgen cannot derive it
	Routes    []string // the operations annotated with it, in document order
	// Where is where the fix goes: "root" (the document's x-idempotency, which every operation
	// inherits), or "operations" when other operations' key headers say otherwise.
	Where string
	// Root says what the document's root x-idempotency already has: "" (none), "mapping",
	// "key" (a key mapping), at RootLine.
	Root     string
	RootLine int
	JSON     bool // the document is JSON: the snippet is written in JSON
}

func (k KeyPattern) String() string {
	pat := k.RE2
	if pat == "" {
		pat = "<the RE2 pattern>"
	}
	var snippet string
	switch {
	case k.JSON && k.Where == "operations":
		snippet = fmt.Sprintf(`"key": {"pattern": %s}`, jsonString(pat))
	case k.JSON && k.Root == "key":
		snippet = fmt.Sprintf(`"pattern": %s`, jsonString(pat))
	case k.JSON && k.Root == "mapping":
		snippet = fmt.Sprintf(`"key": {"pattern": %s}`, jsonString(pat))
	case k.JSON:
		snippet = fmt.Sprintf(`"x-idempotency": {"key": {"pattern": %s}}`, jsonString(pat))
	case k.Where == "operations":
		snippet = fmt.Sprintf("key: {pattern: %s}", yamlQuote(pat))
	case k.Root == "key":
		snippet = "pattern: " + yamlQuote(pat)
	case k.Root == "mapping":
		snippet = fmt.Sprintf("key: {pattern: %s}", yamlQuote(pat))
	default:
		snippet = fmt.Sprintf("x-idempotency: {key: {pattern: %s}}", yamlQuote(pat))
	}
	var where string
	switch {
	case k.Where == "operations":
		where = "add " + snippet + " to the x-idempotency of each of them (not at the document's root: other operations' key headers declare another pattern)"
	case k.Root == "key":
		where = fmt.Sprintf("add %s under the document root's x-idempotency.key (line %d)", snippet, k.RootLine)
	case k.Root == "mapping":
		where = fmt.Sprintf("add %s to the document root's x-idempotency (line %d)", snippet, k.RootLine)
	default:
		where = "add at the document's root: " + snippet
	}
	derived := ", the same keys written in RE2"
	if k.RE2 == "" {
		derived = "; idemgen cannot rewrite this pattern in RE2 itself (it does for a look-ahead at the first character or a look-behind at the last), so write one that accepts the same keys"
	}
	quote := yamlQuote
	if k.JSON {
		quote = jsonString
	}
	return fmt.Sprintf("%s:%d:%d: the key header %s's pattern %s is not RE2, the syntax Go's regexp (and so the server) enforces (%s); generate refuses the %d operation(s) annotated with it (%s) until the document says which pattern the server enforces: %s%s",
		k.File, k.Line, k.Col, k.Header, quote(k.Pattern), k.Why, len(k.Routes), routesPhrase(k.Routes), where, derived)
}

func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// InputError is a document that cannot be read as OpenAPI 3: not YAML or JSON, not OpenAPI 3,
// or refused by kin-openapi's loader.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// OptionError is an option value that makes no sense.
type OptionError struct{ Err error }

func (e *OptionError) Error() string { return e.Err.Error() }
func (e *OptionError) Unwrap() error { return e.Err }

// Names of the shared components the annotator adds.
const (
	KeyParamName      = "IdempotencyKey"
	ProblemSchemaName = "IdempotencyProblem"
	// ProblemResponse differs from ProblemSchemaName: oapi-codegen's resolve-type-name-collisions
	// renames a response that shares a schema's name, but not the strict server's types derived
	// from it, and the package then does not compile.
	ProblemResponse    = "IdempotencyRefusal"
	ReplayedHeaderName = "IdempotentReplayed"
	ReplayedHeader     = idemhttp.HeaderReplayed
)

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// doc is what the planner needs from either format.
type doc interface {
	insertions() ([]insertion, error)
}

// Annotate returns data with x-idempotency added to the selected operations. file is used in
// messages and to resolve relative $refs when kin-openapi loads the document.
func Annotate(file string, data []byte, opts Options) (*Result, error) {
	if err := opts.validate(); err != nil {
		return nil, &OptionError{err}
	}
	root, d, err := parse(data)
	if err != nil {
		return nil, &InputError{file, err}
	}
	if v := root.str("openapi"); !strings.HasPrefix(v, "3.") {
		return nil, &InputError{file, errors.New(`not an OpenAPI 3 document (no "openapi: 3.x" field)`)}
	}
	loaded, err := spec.LoadData(file, data, nil)
	if err != nil {
		return nil, &InputError{file, loadError(file, data, err)}
	}
	flags, err := opts.raw()
	if err != nil {
		return nil, &OptionError{err}
	}
	_, isJSON := d.(*jsonDoc)
	p := &planner{file: file, root: root, opts: opts, loaded: loaded, flags: flags, json: isJSON}
	if err := p.plan(); err != nil {
		var oe *OptionError
		if errors.As(err, &oe) {
			return nil, err
		}
		return nil, &InputError{file, err}
	}
	res := &Result{Output: data, Annotated: p.annotated, Skipped: p.skipped, Scopes: p.scopeChoices(), Kept: p.kept, KeyPatterns: p.keyPatterns, RefusalsUndeclared: p.undeclared}
	for _, route := range p.annotated {
		if u := p.unprinted[route]; len(u) > 0 {
			res.Unprinted = append(res.Unprinted, Unprinted{Route: route, Headers: u})
		}
	}
	if len(p.annotated) == 0 {
		return res, nil
	}
	ins, err := d.insertions()
	if err != nil {
		return nil, &InputError{file, err}
	}
	res.Output = splice(data, ins)
	// The output must read back: a failure here is a bug of the annotator, not of the input.
	if _, _, err := parse(res.Output); err != nil {
		return nil, fmt.Errorf("%s: annotate produced text that does not parse (a bug, please report it): %w", file, err)
	}
	if err := p.checkOutput(res.Output); err != nil {
		return nil, fmt.Errorf("%s: %w (a bug, please report it)", file, err)
	}
	return res, nil
}

// loadError says why the document cannot be loaded: kin-openapi's reason when it is the one
// refusing, placed at its line and column.
func loadError(file string, data []byte, err error) error {
	kerr := kinLoad(file, data)
	if kerr == nil {
		return err
	}
	line, col, msg := spec.LoadFailure(kerr)
	where := ""
	if line > 0 {
		where = fmt.Sprintf(" (line %d, column %d)", line, col)
	}
	return fmt.Errorf("kin-openapi cannot load it%s, fix the document first: %s", where, msg)
}

// checkOutput loads the annotated document through the loader lint and generate use: it must
// load, and every operation annotate marked must resolve without an error. Only the key header
// may be missing, when --no-key-param leaves declaring it to the user.
func (p *planner) checkOutput(out []byte) error {
	s, err := spec.LoadData(p.file, out, nil)
	if err != nil {
		return fmt.Errorf("annotate produced a document that does not load: %w", err)
	}
	annotated := map[string]bool{}
	for _, r := range p.annotated {
		annotated[r] = true
	}
	for _, d := range s.Diagnostics {
		if d.Severity == policy.SeverityError && annotated[d.Operation] && !p.expected(d) {
			return fmt.Errorf("annotate produced a policy that does not resolve: %s", d)
		}
	}
	return nil
}

// expected reports the one error annotate leaves on purpose: an undeclared key header under
// --no-key-param.
func (p *planner) expected(d policy.Diagnostic) bool {
	if d.Rule == policy.RuleKeyPatternInvalid && p.badPattern(d) != nil {
		return true // reported once, in Result.KeyPatterns
	}
	return p.opts.NoKeyParam && d.Rule == policy.RuleKeyHeaderUndeclared
}

// badPattern is the KeyPattern a key-pattern-invalid diagnostic of the annotated output is
// about (the lines have moved: it is found by its operation), or nil.
func (p *planner) badPattern(d policy.Diagnostic) *KeyPattern {
	for i := range p.keyPatterns {
		if k := &p.keyPatterns[i]; slices.Contains(k.Routes, d.Operation) {
			return k
		}
	}
	return nil
}

func parse(data []byte) (*node, doc, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, errors.New("the file is empty")
	}
	if trimmed[0] == '{' {
		d, err := parseJSON(data)
		if err != nil {
			return nil, nil, err
		}
		return d.root, d, nil
	}
	d, err := parseYAML(data)
	if err != nil {
		return nil, nil, err
	}
	if d.root.kind != kindMap || d.root.flow {
		return nil, nil, errors.New("the document is not a block mapping of OpenAPI fields")
	}
	return d.root, d, nil
}

func kinLoad(file string, data []byte) error {
	// The loader generate and lint use: relative $refs to local files are followed, remote ones
	// refused.
	loader := spec.NewLoader(nil)
	abs, err := filepath.Abs(file)
	if err != nil {
		abs = file
	}
	_, err = loader.LoadFromDataWithPath(data, &url.URL{Path: filepath.ToSlash(abs)})
	return err
}

// splice inserts the texts; at one offset the deeper container's text goes first, so nested
// additions that end on the same line stay inside their parent.
func splice(data []byte, ins []insertion) []byte {
	sort.SliceStable(ins, func(i, j int) bool {
		if ins[i].off != ins[j].off {
			return ins[i].off < ins[j].off
		}
		return ins[i].depth > ins[j].depth
	})
	var b bytes.Buffer
	prev := 0
	for _, in := range ins {
		b.Write(data[prev:in.off])
		b.WriteString(in.text)
		prev = in.off
	}
	b.Write(data[prev:])
	return b.Bytes()
}

func (o *Options) validate() error {
	for _, m := range o.Methods {
		if !slices.Contains(httpMethods, strings.ToLower(m)) {
			return fmt.Errorf("--methods: %q is not an HTTP method (use e.g. post,patch,put,delete)", m)
		}
	}
	return nil
}

// raw reads the policy options as the x-idempotency fields they stand for, each checked by
// package policy, the same parsers a spec's values go through.
func (o *Options) raw() (*policy.Raw, error) {
	r := &policy.Raw{}
	bad := func(flag string, p *policy.Finding) error { return fmt.Errorf("%s: %s", flag, p.Msg) }
	if o.Storage != "" {
		v, p := policy.ParseStorage(o.Storage)
		if p != nil {
			return nil, bad("--storage", p)
		}
		r.Storage = policy.Value(v, policy.Position{})
	}
	if o.Claim != "" {
		v, p := policy.ParseClaim(o.Claim)
		if p != nil {
			return nil, bad("--claim", p)
		}
		r.Claim = policy.Value(v, policy.Position{})
	}
	for _, f := range []struct {
		flag, field, v string
		dst            *policy.Field[time.Duration]
	}{{"--ttl", "ttl", o.TTL, &r.TTL}, {"--lease", "lease", o.Lease, &r.Lease}, {"--wait", "wait", o.Wait, &r.Wait}} {
		if f.v == "" {
			continue
		}
		d, p := policy.ParseDurationField(f.field, f.v)
		if p != nil {
			return nil, bad(f.flag, p)
		}
		*f.dst = policy.Value(d, policy.Position{})
	}
	if o.MismatchStatus != 0 {
		v, p := policy.ParseMismatchStatus(o.MismatchStatus)
		if p != nil {
			return nil, bad("--mismatch-status", p)
		}
		r.MismatchStatus = policy.Value(v, policy.Position{})
	}
	if o.Scope != nil {
		scope, probs := policy.ParseScope(o.Scope)
		if len(probs) > 0 {
			return nil, bad("--scope", probs[0].Finding)
		}
		var items []policy.Placed[policy.ScopeItem]
		for _, it := range scope {
			items = append(items, policy.Placed[policy.ScopeItem]{V: it})
		}
		r.Scope = policy.Value(items, policy.Position{})
	}
	return r, nil
}

// flagOf names the option behind an x-idempotency field, for messages about the options.
func flagOf(field string) string {
	switch field {
	case "mismatchStatus":
		return "--mismatch-status"
	case "storage", "ttl", "lease", "wait", "claim", "scope":
		return "--" + field
	}
	return "x-idempotency." + field
}

type planner struct {
	file   string
	root   *node
	opts   Options
	loaded *spec.Spec  // the input, as lint and generate load it
	flags  *policy.Raw // the policy options as x-idempotency fields
	// def is what an operation gets when it writes nothing: the document's defaults over the
	// built-in ones. scopeSet says the document's defaults name a scope.
	def      *policy.Policy
	scopeSet bool

	annotated []string
	skipped   []Skip
	kept      []Kept
	// unprinted are the headers the resolved policy of each operation resolveErr looked at leaves
	// out of the default fingerprint, by route.
	unprinted map[string][]policy.Unprinted

	keyParamRef, problemRef, replayedRef string // set once the shared component is planned
	keyParamHeader                       string
	dominantHeader                       string

	// chosen records the scopes annotate chose, by scope, with the operations and reasons.
	chosen map[string]*ScopeChoice

	// keyPatterns are the key header patterns that are not RE2, with the operations annotated
	// with them; keyPatternOf holds each annotated operation's key header pattern, by route.
	keyPatterns  []KeyPattern
	keyPatternOf map[string]string
	json         bool
	// undeclared are the operations whose refusal responses were left undeclared: renderer:
	// custom, and no error body of the spec's own to declare them with.
	undeclared []string
}

// op is one operation of the document.
type op struct {
	method, path, id string
	node, pathItem   *node
	line, col        int // where the method key is written
}

func (o op) route() string { return strings.ToUpper(o.method) + " " + o.path }

func (p *planner) operations() ([]op, error) {
	var ops []op
	paths := p.root.get("paths")
	if paths == nil {
		return nil, nil
	}
	if !paths.isMap() {
		return nil, errors.New("paths is not a mapping")
	}
	for _, e := range paths.entries {
		item := e.value
		if !item.isMap() {
			continue
		}
		for _, pe := range item.entries {
			if !slices.Contains(httpMethods, pe.key) || !pe.value.isMap() {
				continue
			}
			ops = append(ops, op{method: pe.key, path: e.key, id: pe.value.str("operationId"), node: pe.value, pathItem: item,
				line: pe.keyLine, col: pe.keyCol})
		}
	}
	return ops, nil
}

func (p *planner) selected(all []op) ([]op, error) {
	methods := p.opts.Methods
	if methods == nil && len(p.opts.Operations) == 0 {
		methods = []string{"post", "patch"}
	}
	// A name is an operationId or "METHOD /path".
	matches := func(n string, o op) bool {
		if o.id != "" && n == o.id {
			return true
		}
		m, path, ok := strings.Cut(strings.TrimSpace(n), " ")
		return ok && strings.EqualFold(m, o.method) && strings.TrimSpace(path) == o.path
	}
	check := func(flag string, list []string) error {
		for _, n := range list {
			if !slices.ContainsFunc(all, func(o op) bool { return matches(n, o) }) {
				return fmt.Errorf("%s: no operation %q in the document (use an operationId or \"POST /path\")", flag, n)
			}
		}
		return nil
	}
	if err := check("--operations", p.opts.Operations); err != nil {
		return nil, err
	}
	if err := check("--exclude", p.opts.Exclude); err != nil {
		return nil, err
	}
	named := func(list []string, o op) bool {
		return slices.ContainsFunc(list, func(n string) bool { return matches(n, o) })
	}
	var out []op
	for _, o := range all {
		if methods != nil && !slices.ContainsFunc(methods, func(m string) bool { return strings.EqualFold(m, o.method) }) {
			continue
		}
		if len(p.opts.Operations) > 0 && !named(p.opts.Operations, o) {
			continue
		}
		if named(p.opts.Exclude, o) {
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

func (p *planner) skip(o op, reason string) {
	p.skipped = append(p.skipped, Skip{File: p.file, Line: o.line, Col: o.col, Route: o.route(), Reason: reason})
}

func (p *planner) plan() error {
	defs := p.loaded.Defaults
	p.def, _ = policy.Resolve(policy.Input{Defaults: defs})
	p.scopeSet = defs != nil && defs.Scope.Set
	if err := p.checkFlags(); err != nil {
		return &OptionError{err}
	}
	all, err := p.operations()
	if err != nil {
		return err
	}
	p.dominantHeader = p.findDominantHeader(all)
	ops, err := p.selected(all)
	if err != nil {
		return err
	}
	for _, o := range ops {
		if o.node.get("x-idempotency") != nil {
			continue // already decided, including an explicit false
		}
		if reason := p.cannot(o); reason != "" {
			p.skip(o, reason)
			continue
		}
		if err := p.annotate(o); err != nil {
			return err
		}
	}
	p.placeKeyPatterns()
	return nil
}

// checkFlags reports the first rule the options break together with the document's defaults
// that the defaults alone do not break (wait longer than the lease, say).
func (p *planner) checkFlags() error {
	_, before := policy.Resolve(policy.Input{Defaults: p.loaded.Defaults})
	_, after := policy.Resolve(policy.Input{Raw: p.flags, Defaults: p.loaded.Defaults})
	for _, d := range after {
		if d.Severity == policy.SeverityError && !slices.Contains(before, d) {
			return fmt.Errorf("%s: %s", flagOf(d.Field), d.Detail())
		}
	}
	return nil
}

// cannot says why o cannot be made idempotent, or "".
func (p *planner) cannot(o op) string {
	if o.pathItem.get("$ref") != nil {
		return "the path item is a $ref; annotate the document it points to"
	}
	if o.node.shared {
		return "the operation is shared through a YAML anchor, alias or merge key; annotate it by hand"
	}
	if !o.node.editable() {
		return "the operation is not a mapping that can be edited"
	}
	if d := p.resolveErr(o); d != nil {
		return d.Message
	}
	if p.keyHeader(o) == "" && p.def.Key.Header != "" && !p.opts.NoKeyParam && p.receiverOf(o) == "" {
		if params := o.node.get("parameters"); params != nil && !params.editable() && !params.fill {
			return "its parameters are shared through a YAML anchor or alias, so the key header cannot be added; add it by hand"
		}
	}
	return ""
}

// resolveErr resolves the policy annotate would write for o, with the key header it would
// declare, and returns the first error, or nil.
func (p *planner) resolveErr(o op) *policy.Diagnostic {
	var mo *model.Operation
	for _, m := range p.loaded.Model.Operations {
		if m.Route() == o.route() {
			mo = m
		}
	}
	if mo == nil {
		return nil // an operation kin-openapi does not list has nothing to resolve against
	}
	in, raw := mo.Input(), *p.flags
	sig := p.receiverOf(o)
	if sig != "" {
		raw.Delivery = receiverRaw(sig)
		if ttl := p.receiverTTL(sig); ttl != "" {
			d, _ := policy.ParseDuration(ttl)
			raw.TTL = policy.Value(d, policy.Position{})
		}
	}
	switch header := p.keyHeader(o); {
	case sig != "":
	case header != "" && p.def.Key.Header != "" && header != p.def.Key.Header:
		raw.Key.Header = policy.Value(header, policy.Position{}) // policy writes key: {header: …}
	case header == "" && p.def.Key.Header != "" && !p.opts.NoKeyParam:
		in.Params = append(slices.Clip(in.Params), policy.Param{Name: p.def.Key.Header, In: "header"})
	}
	pol, diags := policy.Resolve(policy.Input{Raw: &raw, Defaults: p.loaded.Defaults, Op: in})
	if p.unprinted == nil {
		p.unprinted = map[string][]policy.Unprinted{}
		p.keyPatternOf = map[string]string{}
	}
	p.unprinted[o.route()] = pol.Unprinted
	var prm policy.Param
	if pol.Key.Header != "" {
		prm, _ = policy.FindParam(in.Params, "header", pol.Key.Header)
		p.keyPatternOf[o.route()] = prm.Pattern
	}
	for _, d := range diags {
		// A key header pattern that is not RE2 does not stop the operation from being
		// annotated: one line of the document's root, said once for all of them, resolves it.
		if d.Rule == policy.RuleKeyPatternInvalid && prm.Pattern != "" && d.Pos == prm.PatternPos {
			p.notRE2(o, prm)
			continue
		}
		if d.Severity == policy.SeverityError && !p.expected(d) {
			return &d
		}
	}
	return nil
}

// notRE2 records that o is annotated with a key header whose pattern is not RE2.
func (p *planner) notRE2(o op, prm policy.Param) {
	for i := range p.keyPatterns {
		if k := &p.keyPatterns[i]; k.Line == prm.PatternPos.Line && k.Col == prm.PatternPos.Col {
			k.Routes = append(k.Routes, o.route())
			return
		}
	}
	_, bad := policy.ParseKeyPattern(prm.Pattern)
	why := ""
	if bad != nil {
		why = strings.TrimPrefix(bad.Msg, fmt.Sprintf("%q is not a valid RE2 regular expression: ", prm.Pattern))
	}
	re2, _ := policy.RE2Form(prm.Pattern)
	p.keyPatterns = append(p.keyPatterns, KeyPattern{File: p.file, Line: prm.PatternPos.Line, Col: prm.PatternPos.Col,
		Header: prm.Name, Pattern: prm.Pattern, Why: why, RE2: re2, Routes: []string{o.route()}, JSON: p.json})
}

// placeKeyPatterns says where each key pattern's fix goes: the document's root, unless another
// operation, annotated or already idempotent, has a key header with another pattern (the root's
// key.pattern would then hold for it too, and disagree with its parameter).
func (p *planner) placeKeyPatterns() {
	var rootState string
	var rootLine int
	for _, e := range p.root.entries {
		if e.key != "x-idempotency" {
			continue
		}
		rootState, rootLine = "mapping", e.keyLine
		for _, ke := range e.value.entries {
			if ke.key == "key" && ke.value.isMap() {
				rootState, rootLine = "key", ke.keyLine
			}
		}
	}
	patterns := map[string]bool{}
	for _, pat := range p.keyPatternOf {
		patterns[pat] = true
	}
	for _, mo := range p.loaded.Model.Idempotent() {
		if prm, ok := policy.FindParam(mo.Params, "header", mo.Policy.Key.Header); ok {
			patterns[prm.Pattern] = true
		}
	}
	var kept []KeyPattern
	for _, k := range p.keyPatterns {
		k.Routes = slices.DeleteFunc(k.Routes, func(r string) bool { return !slices.Contains(p.annotated, r) })
		if len(k.Routes) > 0 {
			kept = append(kept, k)
		}
	}
	p.keyPatterns = kept
	for i := range p.keyPatterns {
		k := &p.keyPatterns[i]
		k.Where, k.Root, k.RootLine = "root", rootState, rootLine
		if len(patterns) > 1 || len(p.keyPatterns) > 1 {
			k.Where = "operations"
		}
	}
}

// resolve follows local $refs ("#/components/…"); it returns nil for a $ref it cannot follow
// (another file, a missing target, a loop).
func (p *planner) resolve(n *node) *node {
	for range 16 {
		r := n.get("$ref")
		if r == nil {
			return n
		}
		ptr, ok := strings.CutPrefix(r.value, "#/")
		if !ok {
			return nil
		}
		cur := p.root
		for _, part := range strings.Split(ptr, "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			if u, err := url.PathUnescape(part); err == nil {
				part = u
			}
			cur = cur.get(part)
		}
		if cur == nil {
			return nil
		}
		n = cur
	}
	return nil
}

// findParam returns the first parameter of the operation, then of its path item, that match
// accepts.
func (p *planner) findParam(o op, match func(in, name string) bool) *node {
	for _, holder := range []*node{o.node, o.pathItem} {
		params := holder.get("parameters")
		if params == nil || params.kind != kindSeq {
			continue
		}
		for _, it := range params.items {
			pn := p.resolve(it)
			if pn != nil && match(pn.str("in"), pn.str("name")) {
				return pn
			}
		}
	}
	return nil
}

// keyHeader is the exact name of the key header the operation already declares, or "".
func (p *planner) keyHeader(o op) string {
	best, rank := "", 0
	for _, holder := range []*node{o.node, o.pathItem} {
		params := holder.get("parameters")
		if params == nil || params.kind != kindSeq {
			continue
		}
		for _, it := range params.items {
			pn := p.resolve(it)
			if pn == nil || pn.str("in") != "header" {
				continue
			}
			name := pn.str("name")
			if p.def.Key.Header != "" && strings.EqualFold(name, p.def.Key.Header) {
				return name
			}
			if r := policy.KeyLikeRank(name); r > rank {
				best, rank = name, r
			}
		}
	}
	return best
}

// findDominantHeader is the spelling of the key header that the document's operations use most,
// so that a header added to the others is spelled the same way.
func (p *planner) findDominantHeader(all []op) string {
	count := map[string]int{}
	var order []string
	for _, o := range all {
		if h := p.keyHeader(o); h != "" && policy.KeyLikeRank(h) == 2 {
			if count[h] == 0 {
				order = append(order, h)
			}
			count[h]++
		}
	}
	best := ""
	for _, h := range order {
		if count[h] > count[best] {
			best = h
		}
	}
	return best
}

func (p *planner) annotate(o op) error {
	if sig := p.receiverOf(o); sig != "" {
		return p.annotateReceiver(o, sig)
	}
	opT := target{n: o.node}
	header := p.keyHeader(o)
	if header == "" && p.def.Key.Header != "" && !p.opts.NoKeyParam {
		refName, name, err := p.keyParam()
		if err != nil {
			return err
		}
		params := opT.childSeq("parameters")
		if !params.valid() {
			return fmt.Errorf("%s: parameters is not a list", o.route())
		}
		params.appendItem(ref(refName))
		header = name
	}
	opT.add(kv{key: "x-idempotency", v: p.policy(header, p.chooseScope(o))})
	p.keep(o)
	if !p.opts.NoProblems {
		if err := p.addProblems(o, opT); err != nil {
			return err
		}
	}
	if !p.opts.NoReplayedHeader {
		if err := p.addReplayed(o); err != nil {
			return err
		}
	}
	p.annotated = append(p.annotated, o.route())
	return nil
}

// chooseScope returns the scope to write for o: --scope, else the document's default scope, else
// the one annotate chooses from whether o has tenants, which it records for Result.Scopes.
func (p *planner) chooseScope(o op) []string {
	if p.opts.Scope != nil {
		return p.opts.Scope
	}
	if p.scopeSet {
		return scopeStrings(p.def.Scope)
	}
	schemes, headers := p.tenantSigns(o)
	scope := []string{"operation"}
	if len(schemes)+len(headers) > 0 {
		scope = []string{"tenant", "operation"}
	}
	id := strings.Join(scope, ",")
	if p.chosen == nil {
		p.chosen = map[string]*ScopeChoice{}
	}
	c := p.chosen[id]
	if c == nil {
		c = &ScopeChoice{File: p.file, Scope: scope}
		p.chosen[id] = c
	}
	c.Routes = append(c.Routes, o.route())
	c.Schemes = appendNew(c.Schemes, schemes...)
	c.Headers = appendNew(c.Headers, headers...)
	return scope
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func (p *planner) scopeChoices() []ScopeChoice {
	var out []ScopeChoice
	for _, id := range []string{"tenant,operation", "operation"} {
		if c := p.chosen[id]; c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// tenantSigns returns what says that o serves more than one tenant. Security means callers are
// told apart: the operation's own requirement, else the document's, else any security scheme
// the document defines (a spec may define its scheme and leave requiring it to the gateway);
// an operation that says security: [] is anonymous. A header named like a tenant (X-Tenant-ID,
// Stripe-Account, X-Organization-Id, …) means the API itself speaks of tenants.
func (p *planner) tenantSigns(o op) (schemes, headers []string) {
	switch sec := o.node.get("security"); {
	case sec != nil:
		schemes = requirementNames(sec)
	case p.root.get("security") != nil:
		schemes = requirementNames(p.root.get("security"))
	default:
		if defs := p.root.get("components").get("securitySchemes"); defs.isMap() {
			for _, e := range defs.entries {
				schemes = append(schemes, e.key)
			}
		}
	}
	for _, holder := range []*node{o.node, o.pathItem} {
		params := holder.get("parameters")
		if params == nil || params.kind != kindSeq {
			continue
		}
		for _, it := range params.items {
			if pn := p.resolve(it); pn != nil && pn.str("in") == "header" && tenantHeader(pn.str("name")) {
				headers = appendNew(headers, pn.str("name"))
			}
		}
	}
	return schemes, headers
}

// requirementNames lists the security schemes a security requirement list names; none for an
// absent or empty list, or one whose only requirement is {} (anonymous access).
func requirementNames(sec *node) []string {
	if sec == nil || sec.kind != kindSeq {
		return nil
	}
	var names []string
	for _, req := range sec.items {
		if req.isMap() {
			for _, e := range req.entries {
				names = appendNew(names, e.key)
			}
		}
	}
	return names
}

// tenantHeader reports header names that carry a tenant, account or organisation.
func tenantHeader(name string) bool {
	l := strings.ToLower(name)
	for _, w := range []string{"tenant", "account", "organization", "organisation", "workspace"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

func scopeStrings(items []policy.ScopeItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return out
}

// policy is the x-idempotency value: true when every field is the document's default. The
// options are written as given, and only where their value differs from the default.
func (p *planner) policy(header string, scope []string) *val {
	o, f, d := p.opts, p.flags, p.def
	var kvs []kv
	if f.Storage.Set && f.Storage.V != d.Storage {
		kvs = append(kvs, kv{key: "storage", v: str(o.Storage)})
	}
	if f.TTL.Set && f.TTL.V != d.TTL {
		kvs = append(kvs, kv{key: "ttl", v: str(o.TTL)})
	}
	if f.Lease.Set && f.Lease.V != d.Lease {
		kvs = append(kvs, kv{key: "lease", v: str(o.Lease)})
	}
	if scope != nil && !slices.Equal(scope, scopeStrings(d.Scope)) {
		s := seq()
		s.flow = true
		for _, it := range scope {
			s.items = append(s.items, str(it))
		}
		kvs = append(kvs, kv{key: "scope", v: s})
	}
	if header != "" && d.Key.Header != "" && header != d.Key.Header {
		kvs = append(kvs, kv{key: "key", v: mapping(kv{key: "header", v: str(header)})})
	}
	if f.Claim.Set && f.Claim.V != d.Claim {
		kvs = append(kvs, kv{key: "claim", v: str(o.Claim)})
	}
	if f.Wait.Set && f.Wait.V != d.Wait {
		kvs = append(kvs, kv{key: "wait", v: str(o.Wait)})
	}
	if f.MismatchStatus.Set && f.MismatchStatus.V != d.MismatchStatus {
		kvs = append(kvs, kv{key: "mismatchStatus", v: lit(strconv.Itoa(o.MismatchStatus))})
	}
	if len(kvs) == 0 {
		return lit("true")
	}
	return mapping(kvs...)
}

func (p *planner) components(section string) (target, error) {
	comps := target{n: p.root}.child("components")
	if !comps.valid() {
		return target{}, errors.New("components is not a mapping that can be edited")
	}
	t := comps.child(section)
	if !t.valid() {
		return target{}, fmt.Errorf("components.%s is not a mapping that can be edited", section)
	}
	return t, nil
}

// keyParam returns the $ref of the shared key header parameter and the header's name: an existing
// component that declares a key header, or a new components.parameters.IdempotencyKey.
func (p *planner) keyParam() (string, string, error) {
	if p.keyParamRef != "" {
		return p.keyParamRef, p.keyParamHeader, nil
	}
	params := p.root.get("components").get("parameters")
	best, bestName, rank := "", "", 0
	if params.isMap() {
		for _, e := range params.entries {
			pn := p.resolve(e.value)
			if pn == nil || pn.str("in") != "header" {
				continue
			}
			name := pn.str("name")
			r := policy.KeyLikeRank(name)
			if strings.EqualFold(name, p.def.Key.Header) {
				r = 3
			}
			if r > rank {
				best, bestName, rank = e.key, name, r
			}
		}
	}
	if best != "" {
		p.keyParamRef, p.keyParamHeader = "#/components/parameters/"+pointerEscape(best), bestName
		return p.keyParamRef, bestName, nil
	}
	t, err := p.components("parameters")
	if err != nil {
		return "", "", err
	}
	name, _ := p.componentName("parameters", KeyParamName, func(*node) bool { return false })
	header := p.dominantOr(p.def.Key.Header)
	t.add(kv{key: name, v: mapping(
		kv{key: "name", v: str(header)},
		kv{key: "in", v: str("header")},
		kv{key: "description", v: str("A unique value (a UUID, say) that identifies this request. A retry with the same key gets the first outcome back instead of repeating it.")},
		kv{key: "required", v: lit(strconv.FormatBool(p.def.Key.Required))},
		kv{key: "schema", v: mapping(
			kv{key: "type", v: str("string")},
			kv{key: "minLength", v: lit("1")},
			kv{key: "maxLength", v: lit("255")},
		)},
	)})
	p.keyParamRef, p.keyParamHeader = "#/components/parameters/"+pointerEscape(name), header
	return p.keyParamRef, header, nil
}

func (p *planner) dominantOr(h string) string {
	if p.dominantHeader != "" {
		return p.dominantHeader
	}
	return h
}

// freeName is base, or base2, base3… when base is taken by something else.
func (p *planner) freeName(t target, base string) string {
	name := base
	for i := 2; t.has(name); i++ {
		name = base + strconv.Itoa(i)
	}
	return name
}

// componentSections are the components oapi-codegen makes a Go type of, each named after its
// key: a name annotate adds must be free in all of them, or the generated types collide.
var componentSections = []string{"schemas", "parameters", "responses", "requestBodies", "headers"}

// componentName is the name under components.<section> for a component annotate adds: base, or
// base2, base3… when base is another component's (of any section, or of this one but not
// annotate's own, as ours tells). exists says a component of annotate's own is there already, to
// be reused.
func (p *planner) componentName(section, base string, ours func(*node) bool) (name string, exists bool) {
	comps := p.root.get("components")
	for i := 1; ; i++ {
		name = base
		if i > 1 {
			name = base + strconv.Itoa(i)
		}
		if n := comps.get(section).get(name); n != nil {
			if ours(n) {
				return name, true
			}
			continue
		}
		if !slices.ContainsFunc(componentSections, func(sec string) bool { return comps.get(sec).get(name) != nil }) {
			return name, false
		}
	}
}

// describedAs returns a test that a component is annotate's own: its description starts with
// the one annotate writes.
func describedAs(prefix string) func(*node) bool {
	return func(n *node) bool { return strings.HasPrefix(n.str("description"), prefix) }
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// The descriptions annotate writes start with these: a component that has one is annotate's own.
const (
	problemSchemaPrefix   = "A problem answer (RFC 9457) from the idempotency layer"
	problemResponsePrefix = "The idempotency key is missing or malformed"
	replayedPrefix        = "True when this response is the stored outcome"
)

// problemSchemaDescription documents every code the runtime answers with, from the runtime's
// own table, so that a new code shows in the next annotated spec.
func problemSchemaDescription() string {
	// signature-invalid answers only webhook receivers, which annotate gives no problem responses.
	codes := slices.DeleteFunc(idemhttp.ProblemCodes(), func(c string) bool { return c == idemhttp.CodeSignatureInvalid })
	return problemSchemaPrefix + ". The code is one of " +
		strings.Join(codes, ", ") + "."
}

func (p *planner) problemResponse() (string, error) {
	if p.problemRef != "" {
		return p.problemRef, nil
	}
	schemas, err := p.components("schemas")
	if err != nil {
		return "", err
	}
	schemaName, exists := p.componentName("schemas", ProblemSchemaName, describedAs(problemSchemaPrefix))
	if !exists {
		str2 := func() *val { return mapping(kv{key: "type", v: str("string")}) }
		schemas.add(kv{key: schemaName, v: mapping(
			kv{key: "type", v: str("object")},
			kv{key: "description", v: str(problemSchemaDescription())},
			kv{key: "properties", v: mapping(
				kv{key: "type", v: mapping(kv{key: "type", v: str("string")}, kv{key: "format", v: str("uri-reference")})},
				kv{key: "title", v: str2()},
				kv{key: "status", v: mapping(kv{key: "type", v: str("integer")})},
				kv{key: "detail", v: str2()},
				kv{key: "instance", v: mapping(kv{key: "type", v: str("string")}, kv{key: "format", v: str("uri-reference")})},
				kv{key: "code", v: str2()},
				kv{key: "errors", v: mapping(
					kv{key: "description", v: str("Each place a body refused by request validation (400 request-invalid) went wrong.")},
					kv{key: "type", v: str("array")},
					kv{key: "items", v: mapping(
						kv{key: "type", v: str("object")},
						kv{key: "properties", v: mapping(
							kv{key: "pointer", v: mapping(kv{key: "type", v: str("string")}, kv{key: "description", v: str("A JSON Pointer into the body, in URI fragment form.")})},
							kv{key: "detail", v: str2()},
						)},
					)},
				)},
			)},
		)})
	}
	responses, err := p.components("responses")
	if err != nil {
		return "", err
	}
	respName, exists := p.componentName("responses", ProblemResponse, describedAs(problemResponsePrefix))
	if !exists {
		responses.add(kv{key: respName, v: mapping(
			kv{key: "description", v: str(problemResponsePrefix + " (400), a request with the same key is still in progress (409, retry after the Retry-After header), the key was already used for a different request, or the idempotency store is unavailable (503, retry after the Retry-After header; the operation did not run).")},
			kv{key: "content", v: mapping(
				kv{key: "application/problem+json", v: mapping(
					kv{key: "schema", v: ref("#/components/schemas/" + pointerEscape(schemaName))},
				)},
			)},
		)})
	}
	p.problemRef = "#/components/responses/" + pointerEscape(respName)
	return p.problemRef, nil
}

// apiError is the error body the spec's own error responses share: a media type and a $ref to
// a schema.
type apiError struct{ mediaType, schemaRef string }

// ownError finds the API's own error body: the media type and schema $ref that the most error
// responses (4xx, 5xx, default) of the document's operations declare, when at least one does and
// none other is as common; ok is false otherwise.
func (p *planner) ownError() (apiError, bool) {
	all, _ := p.operations()
	count := map[apiError]int{}
	var order []apiError
	for _, o := range all {
		responses := o.node.get("responses")
		if !responses.isMap() {
			continue
		}
		for _, e := range responses.entries {
			if !(strings.HasPrefix(e.key, "4") || strings.HasPrefix(e.key, "5") || e.key == "default") {
				continue
			}
			r := p.resolve(e.value)
			content := r.get("content")
			if !content.isMap() || len(content.entries) != 1 {
				continue
			}
			mt := content.entries[0]
			ref := mt.value.get("schema").get("$ref")
			if ref == nil || ref.kind != kindScalar || ref.value == "" || strings.Contains(mt.key, "problem+json") {
				continue
			}
			ae := apiError{mt.key, ref.value}
			if count[ae] == 0 {
				order = append(order, ae)
			}
			count[ae]++
		}
	}
	var best apiError
	tie := false
	for _, ae := range order {
		switch {
		case count[ae] > count[best]:
			best, tie = ae, false
		case count[ae] == count[best]:
			tie = true
		}
	}
	return best, count[best] > 0 && !tie
}

// ownErrorResponse returns the $ref of a components.responses entry for the refusals in the
// API's own error body (see ownError), adding it the first time; "" when the spec has no error
// body of its own to document them with.
func (p *planner) ownErrorResponse() (string, error) {
	if p.problemRef != "" {
		return p.problemRef, nil
	}
	ae, ok := p.ownError()
	if !ok {
		return "", nil
	}
	responses, err := p.components("responses")
	if err != nil {
		return "", err
	}
	name, exists := p.componentName("responses", ProblemResponse, describedAs(problemResponsePrefix))
	if !exists {
		responses.add(kv{key: name, v: mapping(
			kv{key: "description", v: str(problemResponsePrefix + " (400), a request with the same key is still in progress (409, retry after the Retry-After header), the key was already used for a different request, or the idempotency store is unavailable (503, retry after the Retry-After header; the operation did not run). The server answers these in the API's own error format.")},
			kv{key: "content", v: mapping(
				kv{key: ae.mediaType, v: mapping(kv{key: "schema", v: ref(ae.schemaRef)})},
			)},
		)})
	}
	p.problemRef = "#/components/responses/" + pointerEscape(name)
	return p.problemRef, nil
}

// keep records the operation's own error responses that stay in place on statuses the runtime
// answers with a problem (the runtime's table, as lint reads it): a response declaring a body
// other than application/problem+json. One with no content, or with problem+json among its media
// types, says nothing wrong and is not reported.
func (p *planner) keep(o op) {
	if p.def.Renderer == policy.RendererCustom {
		return // refusals are answered in the spec's own error format
	}
	mismatch := p.def.MismatchStatus
	if p.flags.MismatchStatus.Set {
		mismatch = p.flags.MismatchStatus.V
	}
	var kop *openapi3.Operation
	if item := p.loaded.Doc.Paths.Value(o.path); item != nil {
		kop = item.GetOperation(strings.ToUpper(o.method))
	}
	responses := o.node.get("responses")
	if kop == nil || kop.Responses == nil || !responses.isMap() {
		return
	}
	for _, e := range responses.entries {
		status, err := strconv.Atoi(e.key)
		if err != nil {
			continue
		}
		codes := policy.ProblemCodesOn(status, mismatch)
		declared := spec.NonProblemBody(kop.Responses.Value(e.key))
		if len(codes) == 0 || declared == "" {
			continue
		}
		p.kept = append(p.kept, Kept{File: p.file, Line: e.keyLine, Col: e.keyCol, Route: o.route(), Status: status, Declared: declared, Codes: codes})
	}
}

func (p *planner) addProblems(o op, opT target) error {
	mismatch := p.def.MismatchStatus
	if p.flags.MismatchStatus.Set {
		mismatch = p.flags.MismatchStatus.V
	}
	codes := []int{400, 409, mismatch, 503}
	slices.Sort(codes)
	codes = slices.Compact(codes)
	existing := o.node.get("responses")
	if existing != nil && (!existing.editable() || existing.flow) {
		// Shared through an alias, not a mapping, or written inline: the problem responses are
		// documentation, not worth rewriting a line of the user's text for.
		return nil
	}
	var quote byte
	if existing != nil {
		for _, e := range existing.entries {
			if isStatusKey(e.key) {
				quote = e.keyQuote
				if quote == 0 {
					quote = 'p'
				}
				break
			}
		}
	}
	var missing []int
	for _, c := range codes {
		if existing.get(strconv.Itoa(c)) == nil {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var refName string
	var err error
	if p.def.Renderer == policy.RendererCustom {
		// The server answers refusals in the API's own error format: documented with the API's
		// error schema, or not at all (lint's refusals-undocumented then says so), never with
		// an RFC 9457 problem the server does not send.
		if refName, err = p.ownErrorResponse(); err != nil {
			return err
		}
		if refName == "" {
			p.undeclared = append(p.undeclared, o.route())
			return nil
		}
	} else if refName, err = p.problemResponse(); err != nil {
		return err
	}
	resp := opT.child("responses")
	if !resp.valid() {
		return nil
	}
	for _, c := range missing {
		resp.add(kv{key: strconv.Itoa(c), keyQuote: quote, v: ref(refName)})
	}
	return nil
}

func (p *planner) addReplayed(o op) error {
	responses := o.node.get("responses")
	if !responses.isMap() || !responses.editable() || responses.flow {
		return nil
	}
	for _, e := range responses.entries {
		if !strings.HasPrefix(e.key, "2") || !isStatusKey(e.key) {
			continue
		}
		resp := e.value
		// A $ref'd response is shared with other operations: documenting the header there would
		// claim it for them too.
		if !resp.isMap() || resp.get("$ref") != nil || !resp.editable() || resp.flow {
			continue
		}
		headers := resp.get("headers")
		if headers != nil && !headers.fill && (!headers.editable() || headers.kind != kindMap || headers.flow || headers.getFold(ReplayedHeader) != nil) {
			continue
		}
		h := target{n: resp}.child("headers")
		if !h.valid() {
			continue
		}
		refName, err := p.replayedHeader()
		if err != nil {
			return err
		}
		h.add(kv{key: ReplayedHeader, v: ref(refName)})
	}
	return nil
}

func (p *planner) replayedHeader() (string, error) {
	if p.replayedRef != "" {
		return p.replayedRef, nil
	}
	headers, err := p.components("headers")
	if err != nil {
		return "", err
	}
	name, exists := p.componentName("headers", ReplayedHeaderName, describedAs(replayedPrefix))
	if !exists {
		headers.add(kv{key: name, v: mapping(
			kv{key: "description", v: str(replayedPrefix + " of an earlier request with the same idempotency key, replayed without running the operation again.")},
			kv{key: "schema", v: mapping(kv{key: "type", v: str("boolean")})},
		)})
	}
	p.replayedRef = "#/components/headers/" + pointerEscape(name)
	return p.replayedRef, nil
}
