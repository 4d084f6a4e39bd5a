// Package annotate adds x-idempotency to the state-changing operations of an existing OpenAPI
// document. It edits the document's own text: the additions are spliced into the original bytes,
// so comments, key order, quoting, anchors and indentation elsewhere stay byte for byte, and a
// review of the change shows only what was added. Running it again on its output changes nothing.
package annotate

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/generator/spec"
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
	Wait           string   // Go duration, lease claims only
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

// Result is the annotated document.
type Result struct {
	Output    []byte
	Annotated []string // routes that received x-idempotency, in document order
	Skipped   []Skip
	// Scopes says which scope annotate chose for which operations, when it chose (no --scope and
	// no scope in the document's defaults); [tenant, operation] first.
	Scopes []ScopeChoice
}

// Changed reports whether the output differs from the input.
func (r *Result) Changed() bool { return len(r.Annotated) > 0 }

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
	KeyParamName       = "IdempotencyKey"
	ProblemSchemaName  = "IdempotencyProblem"
	ProblemResponse    = "IdempotencyProblem"
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
	if err := kinLoad(file, data); err != nil {
		line, col, msg := spec.LoadFailure(err)
		where := ""
		if line > 0 {
			where = fmt.Sprintf(" (line %d, column %d)", line, col)
		}
		return nil, &InputError{file, fmt.Errorf("kin-openapi cannot load it%s, fix the document first: %s", where, msg)}
	}
	p := &planner{file: file, root: root, opts: opts}
	if err := p.plan(); err != nil {
		var oe *OptionError
		if errors.As(err, &oe) {
			return nil, err
		}
		return nil, &InputError{file, err}
	}
	res := &Result{Output: data, Annotated: p.annotated, Skipped: p.skipped, Scopes: p.scopeChoices()}
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
	if err := kinLoad(file, res.Output); err != nil {
		return nil, fmt.Errorf("%s: annotate produced a document kin-openapi cannot load (a bug, please report it): %w", file, err)
	}
	return res, nil
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

var scopeItem = regexp.MustCompile(`^(tenant|operation|header:[!#$%&'*+\-.^_` + "`" + `|~0-9A-Za-z]+|path:[A-Za-z0-9_.\-]+)$`)

func (o *Options) validate() error {
	for _, m := range o.Methods {
		if !slices.Contains(httpMethods, strings.ToLower(m)) {
			return fmt.Errorf("--methods: %q is not an HTTP method (use e.g. post,patch,put,delete)", m)
		}
	}
	switch o.Storage {
	case "", "response", "reference", "marker":
	default:
		return fmt.Errorf("--storage: %q is not a storage mode (use response, reference or marker)", o.Storage)
	}
	switch o.Claim {
	case "", "lease", "transaction":
	default:
		return fmt.Errorf("--claim: %q is not a claim mode (use lease or transaction)", o.Claim)
	}
	for _, f := range []struct{ name, v string }{{"--ttl", o.TTL}, {"--lease", o.Lease}, {"--wait", o.Wait}} {
		if f.v == "" {
			continue
		}
		d, err := model.ParseDuration(f.v)
		if err != nil || d < 0 || (d == 0 && f.name != "--wait") {
			return fmt.Errorf("%s: %q is not a positive duration (use e.g. 24h, 90s or 3d)", f.name, f.v)
		}
	}
	if o.Wait != "" && o.Claim == "transaction" {
		return errors.New("--wait applies to --claim lease only (a transaction claim waits for the first request by itself)")
	}
	switch o.MismatchStatus {
	case 0, 400, 409, 422:
	default:
		return fmt.Errorf("--mismatch-status: %d is not allowed (use 422, 409 or 400)", o.MismatchStatus)
	}
	seen := map[string]bool{}
	for _, s := range o.Scope {
		if !scopeItem.MatchString(s) {
			return fmt.Errorf("--scope: %q is not a scope item (use tenant, operation, header:<Name> or path:<param>)", s)
		}
		if seen[strings.ToLower(s)] {
			return fmt.Errorf("--scope: %q is listed twice", s)
		}
		seen[strings.ToLower(s)] = true
	}
	return nil
}

// defaults are the values a field takes when an operation does not write it: the document's
// root x-idempotency mapping, else the built-in defaults (model.Default…).
type defaults struct {
	storage, ttl, lease, wait, claim string
	scope                            []string
	scopeSet                         bool // the document's defaults name a scope
	mismatch                         int
	keyHeader                        string // "" when the key comes from a path parameter
	keyRequired                      bool
}

func readDefaults(root *node) defaults {
	d := defaults{storage: model.DefaultStorage, ttl: model.FormatDuration(model.DefaultTTL),
		lease: model.FormatDuration(model.DefaultLease), wait: model.FormatDuration(model.DefaultWait),
		claim: model.DefaultClaim, scope: model.DefaultScope(), mismatch: model.DefaultMismatchStatus,
		keyHeader: model.DefaultKeyHeader, keyRequired: true}
	x := root.get("x-idempotency")
	if !x.isMap() {
		return d
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"storage", &d.storage}, {"ttl", &d.ttl}, {"lease", &d.lease}, {"wait", &d.wait}, {"claim", &d.claim}} {
		if v := x.str(f.key); v != "" {
			*f.dst = v
		}
	}
	if s := x.get("scope"); s != nil && s.kind == kindSeq {
		d.scope, d.scopeSet = nil, true
		for _, it := range s.items {
			d.scope = append(d.scope, it.value)
		}
	}
	if v, err := strconv.Atoi(x.str("mismatchStatus")); err == nil {
		d.mismatch = v
	}
	if k := x.get("key"); k.isMap() {
		if h := k.str("header"); h != "" {
			d.keyHeader = h
		}
		if k.str("from") != "" && k.str("header") == "" {
			d.keyHeader = ""
		}
		if k.str("required") == "false" {
			d.keyRequired = false
		}
	}
	return d
}

func sameDuration(a, b string) bool {
	da, errA := model.ParseDuration(a)
	db, errB := model.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

type planner struct {
	file string
	root *node
	opts Options
	def  defaults

	annotated []string
	skipped   []Skip

	keyParamRef, problemRef, replayedRef string // set once the shared component is planned
	keyParamHeader                       string
	dominantHeader                       string

	// chosen records the scopes annotate chose, by scope, with the operations and reasons.
	chosen map[string]*ScopeChoice
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
	p.def = readDefaults(p.root)
	lease, wait := or(p.opts.Lease, p.def.lease), or(p.opts.Wait, p.def.wait)
	if dl, err := model.ParseDuration(lease); err == nil {
		if dw, err := model.ParseDuration(wait); err == nil && dw > dl {
			return &OptionError{fmt.Errorf("--wait: %s is longer than the lease (%s); a duplicate would still be waiting when the claim can be taken over (use a shorter --wait)", wait, lease)}
		}
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
	switch or(p.opts.Storage, p.def.storage) {
	case "reference":
		if _, withBody := p.successResponses(o); !withBody {
			return "storage reference replays by reloading the resource into a 2xx response with a body, and the operation declares none (declare one, or use --storage response)"
		}
	case "marker":
		if any, _ := p.successResponses(o); !any {
			return "storage marker replays by recomputing a 2xx response, and the operation declares none (declare one, or use --storage response)"
		}
	}
	for _, s := range p.scope() {
		kind, name, ok := strings.Cut(s, ":")
		if !ok {
			continue
		}
		in := kind
		if p.findParam(o, func(pin, pname string) bool {
			return pin == in && (pname == name || in == "header" && strings.EqualFold(pname, name))
		}) == nil {
			return fmt.Sprintf("scope item %s names no %s parameter of the operation or its path item", s, in)
		}
	}
	if p.keyHeader(o) == "" && p.def.keyHeader != "" && !p.opts.NoKeyParam {
		if params := o.node.get("parameters"); params != nil && !params.editable() && !params.fill {
			return "its parameters are shared through a YAML anchor or alias, so the key header cannot be added; add it by hand"
		}
	}
	return ""
}

// successResponses reports whether o declares a 2xx response, and whether one of them has a body.
func (p *planner) successResponses(o op) (anySuccess, withBody bool) {
	responses := o.node.get("responses")
	if !responses.isMap() {
		return false, false
	}
	for _, e := range responses.entries {
		if !isStatusKey(e.key) || e.key[0] != '2' {
			continue
		}
		anySuccess = true
		if r := p.resolve(e.value); r.isMap() {
			if c := r.get("content"); c.isMap() && len(c.entries) > 0 {
				withBody = true
			}
		}
	}
	return anySuccess, withBody
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (p *planner) scope() []string {
	if p.opts.Scope != nil {
		return p.opts.Scope
	}
	return p.def.scope
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

// keyRank orders the spellings of an idempotency key header: 2 for Idempotency-Key and its
// variants (idempotency-key, X-Idempotency-Key, Acme-Idempotency-Token), 1 for a vendor's
// request id (PayPal-Request-Id), 0 for anything else. X-Request-Id is a tracing header. The
// same headers are "key-like" for generator/spec's lint.
func keyRank(name string) int {
	l := strings.ToLower(name)
	switch {
	case strings.Contains(l, "idempoten"):
		return 2
	case strings.HasSuffix(l, "-request-id") && l != "x-request-id":
		return 1
	}
	return 0
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
			if p.def.keyHeader != "" && strings.EqualFold(name, p.def.keyHeader) {
				return name
			}
			if r := keyRank(name); r > rank {
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
		if h := p.keyHeader(o); h != "" && keyRank(h) == 2 {
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
	opT := target{n: o.node}
	header := p.keyHeader(o)
	if header == "" && p.def.keyHeader != "" && !p.opts.NoKeyParam {
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
	if p.def.scopeSet {
		return p.def.scope
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

// policy is the x-idempotency value: true when every field is the document's default.
func (p *planner) policy(header string, scope []string) *val {
	o, d := p.opts, p.def
	var kvs []kv
	if o.Storage != "" && o.Storage != d.storage {
		kvs = append(kvs, kv{key: "storage", v: str(o.Storage)})
	}
	if o.TTL != "" && !sameDuration(o.TTL, d.ttl) {
		kvs = append(kvs, kv{key: "ttl", v: str(o.TTL)})
	}
	if o.Lease != "" && !sameDuration(o.Lease, d.lease) {
		kvs = append(kvs, kv{key: "lease", v: str(o.Lease)})
	}
	if scope != nil && !slices.Equal(scope, d.scope) {
		s := seq()
		s.flow = true
		for _, it := range scope {
			s.items = append(s.items, str(it))
		}
		kvs = append(kvs, kv{key: "scope", v: s})
	}
	if header != "" && d.keyHeader != "" && header != d.keyHeader {
		kvs = append(kvs, kv{key: "key", v: mapping(kv{key: "header", v: str(header)})})
	}
	if o.Claim != "" && o.Claim != d.claim {
		kvs = append(kvs, kv{key: "claim", v: str(o.Claim)})
	}
	if o.Wait != "" && !sameDuration(o.Wait, d.wait) {
		kvs = append(kvs, kv{key: "wait", v: str(o.Wait)})
	}
	if o.MismatchStatus != 0 && o.MismatchStatus != d.mismatch {
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
			r := keyRank(name)
			if strings.EqualFold(name, p.def.keyHeader) {
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
	name := p.freeName(t, KeyParamName)
	header := p.dominantOr(p.def.keyHeader)
	t.add(kv{key: name, v: mapping(
		kv{key: "name", v: str(header)},
		kv{key: "in", v: str("header")},
		kv{key: "description", v: str("A unique value (a UUID, say) that identifies this request. A retry with the same key gets the first outcome back instead of repeating it.")},
		kv{key: "required", v: lit(strconv.FormatBool(p.def.keyRequired))},
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

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// problemSchemaDescription documents every code the runtime answers with, from the runtime's
// own table, so that a new code shows in the next annotated spec.
func problemSchemaDescription() string {
	return "A problem answer (RFC 9457) from the idempotency layer. The code is one of " +
		strings.Join(idemhttp.ProblemCodes(), ", ") + "."
}

func (p *planner) problemResponse() (string, error) {
	if p.problemRef != "" {
		return p.problemRef, nil
	}
	schemas, err := p.components("schemas")
	if err != nil {
		return "", err
	}
	schemaName := ProblemSchemaName
	if !schemas.has(schemaName) {
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
			)},
		)})
	}
	responses, err := p.components("responses")
	if err != nil {
		return "", err
	}
	respName := ProblemResponse
	if !responses.has(respName) {
		responses.add(kv{key: respName, v: mapping(
			kv{key: "description", v: str("The idempotency key is missing or malformed (400), a request with the same key is still in progress (409, retry after the Retry-After header), the key was already used for a different request, or the idempotency store is unavailable (503, retry after the Retry-After header; the operation did not run).")},
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

func (p *planner) addProblems(o op, opT target) error {
	mismatch := p.opts.MismatchStatus
	if mismatch == 0 {
		mismatch = p.def.mismatch
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
	refName, err := p.problemResponse()
	if err != nil {
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
	if !headers.has(ReplayedHeaderName) {
		headers.add(kv{key: ReplayedHeaderName, v: mapping(
			kv{key: "description", v: str("True when this response is the stored outcome of an earlier request with the same idempotency key, replayed without running the operation again.")},
			kv{key: "schema", v: mapping(kv{key: "type", v: str("boolean")})},
		)})
	}
	p.replayedRef = "#/components/headers/" + ReplayedHeaderName
	return p.replayedRef, nil
}
