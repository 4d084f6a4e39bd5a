package spec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
)

// The built-in defaults are model's (model.DefaultTTL, …), applied under the document-level
// defaults.
const (
	defaultTTL            = model.DefaultTTL
	defaultLease          = model.DefaultLease
	defaultMismatchStatus = model.DefaultMismatchStatus
	defaultKeyHeader      = model.DefaultKeyHeader
	maxKeyLength          = model.MaxKeyLength
)

var defaultPersist = model.DefaultPersist()

// methodOrder is the order of operations within a path: the common methods first, as most specs
// and documentation list them, then any other method alphabetically.
var methodOrder = []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}

func methodRank(m string) int {
	for i, x := range methodOrder {
		if x == m {
			return i
		}
	}
	return len(methodOrder)
}

type builder struct {
	file  string
	tree  *yaml.Node
	doc   *openapi3.T
	diags []Diagnostic
	defs  *rawPolicy // document-level defaults; nil when absent or invalid
}

// report adds a diagnostic at n; n may be nil only for positions that cannot be known.
func (b *builder) report(n *yaml.Node, rule, op, msg string) {
	b.diags = append(b.diags, Diagnostic{
		Pos:       posOf(b.file, n),
		Severity:  ruleSeverity(rule),
		Rule:      rule,
		Operation: op,
		Message:   msg,
	})
}

func (b *builder) build() *model.Document {
	d := &model.Document{File: b.file, Operations: []*model.Operation{}}
	if k, v := lookup(b.tree, "x-idempotency"); k != nil {
		if v != nil && v.Kind == yaml.MappingNode {
			b.defs = (&checker{b: b}).parsePolicy(v)
		} else {
			b.report(v, RuleRootInvalid, "", fmt.Sprintf("x-idempotency: at the document root it must be a mapping of defaults such as {ttl: 48h}, got %s (mark each operation with x-idempotency: true instead)", show(v)))
		}
	}
	if b.doc.Paths == nil {
		return d
	}
	_, pathsNode := lookup(b.tree, "paths")
	paths := b.doc.Paths.Map()
	names := make([]string, 0, len(paths))
	for p := range paths {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		item := paths[p]
		if item == nil {
			continue
		}
		pathKey, itemNode := lookup(pathsNode, p)
		ops := item.Operations()
		methods := make([]string, 0, len(ops))
		for m := range ops {
			methods = append(methods, m)
		}
		sort.Slice(methods, func(i, j int) bool {
			ri, rj := methodRank(methods[i]), methodRank(methods[j])
			if ri != rj {
				return ri < rj
			}
			return methods[i] < methods[j]
		})
		for _, m := range methods {
			d.Operations = append(d.Operations, b.operation(p, m, item, ops[m], pathKey, itemNode))
		}
	}
	return d
}

// operation builds one model operation and checks its x-idempotency.
func (b *builder) operation(path, method string, item *openapi3.PathItem, op *openapi3.Operation, pathKey, itemNode *yaml.Node) *model.Operation {
	opKey, opNode := lookup(itemNode, strings.ToLower(method))
	if opKey == nil {
		if _, extra := lookup(itemNode, "additionalOperations"); extra != nil {
			opKey, opNode = lookup(extra, method)
		}
	}
	anchor := opKey
	if anchor == nil {
		// The operation lives in another file (a path item $ref): point at the path instead.
		anchor = pathKey
	}
	o := &model.Operation{
		ID:     op.OperationID,
		Method: method,
		Path:   path,
		Pos:    posOf(b.file, anchor),
	}
	route := o.Route()
	o.Params = b.params(item, op, itemNode, opNode, anchor)
	o.Body, o.BodyTypes = bodyKind(op.RequestBody)

	extKey, ext := lookup(opNode, "x-idempotency")
	if extKey == nil {
		if v, ok := op.Extensions["x-idempotency"]; ok {
			extKey, ext = anchor, fromValue(v, anchor)
		}
	}
	explicitOff := false
	var raw *rawPolicy
	switch {
	case extKey == nil:
		if method == "POST" {
			b.report(anchor, RulePostWithout, route, "POST without x-idempotency: a retried request may run twice (add x-idempotency: true, or x-idempotency: false to opt out on purpose; idemgen annotate adds it)")
		}
	case isScalar(ext) && ext.Tag == "!!bool":
		if ext.Value == "true" {
			raw = &rawPolicy{}
		} else {
			explicitOff = true
		}
	case ext != nil && ext.Kind == yaml.MappingNode:
		raw = (&checker{b: b, op: route}).parsePolicy(ext)
	default:
		b.report(ext, RuleTypeInvalid, route, fmt.Sprintf("x-idempotency: expected true, false or a mapping, got %s", show(ext)))
	}
	if raw != nil {
		o.Policy = b.resolve(o, op, raw, extKey)
		b.conflictShared(o, op, opNode, anchor)
	}
	// The unused-key-header warning is for operations without x-idempotency and for policies keyed
	// elsewhere; an explicit opt-out is deliberate, and an invalid x-idempotency has its error.
	if !explicitOff && (extKey == nil || raw != nil) {
		b.unusedKeyHeaders(o)
	}
	return o
}

// params merges the path item's parameters with the operation's; an operation parameter replaces
// a path item parameter with the same location and name (header names compare case-insensitively).
func (b *builder) params(item *openapi3.PathItem, op *openapi3.Operation, itemNode, opNode, anchor *yaml.Node) []model.Param {
	var out []model.Param
	add := func(refs openapi3.Parameters, listNode *yaml.Node) {
		_, list := lookup(listNode, "parameters")
		for i, ref := range refs {
			if ref == nil || ref.Value == nil {
				continue
			}
			n := anchor
			if list != nil && list.Kind == yaml.SequenceNode && i < len(list.Content) {
				n = resolve(list.Content[i])
				if nk, _ := lookup(n, "name"); nk != nil {
					n = nk
				}
			}
			p := model.Param{Name: ref.Value.Name, In: ref.Value.In, Required: ref.Value.Required, Pos: posOf(b.file, n)}
			replaced := false
			for j := range out {
				if sameParam(out[j], p) {
					out[j], replaced = p, true
				}
			}
			if !replaced {
				out = append(out, p)
			}
		}
	}
	add(item.Parameters, itemNode)
	add(op.Parameters, opNode)
	return out
}

func sameParam(a, b model.Param) bool {
	if a.In != b.In {
		return false
	}
	if a.In == "header" {
		return strings.EqualFold(a.Name, b.Name)
	}
	return a.Name == b.Name
}

// bodyKind classifies the request body by its declared media types (model.ClassifyMediaType):
// one kind when they all share it, BodyBytes when they differ.
func bodyKind(rb *openapi3.RequestBodyRef) (model.BodyKind, []string) {
	if rb == nil || rb.Value == nil || len(rb.Value.Content) == 0 {
		return model.BodyNone, nil
	}
	types := make([]string, 0, len(rb.Value.Content))
	for mt := range rb.Value.Content {
		types = append(types, mt)
	}
	sort.Strings(types)
	kind := model.ClassifyMediaType(types[0])
	for _, mt := range types[1:] {
		if model.ClassifyMediaType(mt) != kind {
			kind = model.BodyBytes
		}
	}
	return kind, types
}

// pick returns the operation's setting, else the document default, else def; fromDefs tells
// messages that the value was inherited.
func pick[T any](op, defs setting[T], def T, anchor *yaml.Node) (v T, n *yaml.Node, fromDefs bool) {
	switch {
	case op.ok:
		return op.v, op.node, false
	case defs.ok:
		return defs.v, defs.node, true
	}
	return def, anchor, false
}

const inherited = "; it comes from the document-level x-idempotency"

func note(fromDefs bool) string {
	if fromDefs {
		return inherited
	}
	return ""
}

// resolve merges the operation's x-idempotency over the document defaults and the built-in ones,
// and runs the checks that need the operation or the merged policy. A field set on the operation
// replaces the default whole (lists are not concatenated); within key, header and from are one
// choice, and required, maxLength and pattern are inherited one by one.
func (b *builder) resolve(o *model.Operation, op *openapi3.Operation, raw *rawPolicy, extKey *yaml.Node) *model.Policy {
	defs := b.defs
	if defs == nil {
		defs = &rawPolicy{}
	}
	route := o.Route()
	errorf := func(n *yaml.Node, rule, format string, args ...any) {
		b.report(n, rule, route, fmt.Sprintf(format, args...))
	}
	p := &model.Policy{Pos: posOf(b.file, extKey)}

	var storageNode, ttlNode, waitNode *yaml.Node
	var storageDefs, ttlDefs, waitDefs bool
	p.Storage, storageNode, storageDefs = pick(raw.storage, defs.storage, model.StorageResponse, extKey)
	p.TTL, ttlNode, ttlDefs = pick(raw.ttl, defs.ttl, defaultTTL, extKey)
	p.Lease, _, _ = pick(raw.lease, defs.lease, defaultLease, extKey)
	p.Wait, waitNode, waitDefs = pick(raw.wait, defs.wait, 0, extKey)
	// No request may wait forever: the handler's time is bounded, by default by the lease.
	p.Timeout, _, _ = pick(raw.timeout, defs.timeout, p.Lease, extKey)
	p.Claim, _, _ = pick(raw.claim, defs.claim, model.ClaimLease, extKey)
	p.MismatchStatus, _, _ = pick(raw.mismatch, defs.mismatch, defaultMismatchStatus, extKey)
	p.Persist, _, _ = pick(raw.persist, defs.persist, defaultPersist, extKey)
	p.Persist = append([]string(nil), p.Persist...)
	fingerprint, printNode, printDefs := pick(raw.fingerprint, defs.fingerprint, true, extKey)
	p.NoFingerprint = !fingerprint
	exclude, _, excludeDefs := pick(raw.exclude, defs.exclude, nil, extKey)
	p.ReplayHeaders, _, _ = pick(raw.replayHeaders, defs.replayHeaders, nil, extKey)

	defScope := []scopeItem{{kind: "tenant"}, {kind: "operation"}}
	scope, _, scopeDefs := pick(raw.scope, defs.scope, defScope, extKey)
	p.Scope = []model.ScopeItem{}
	for _, it := range scope {
		n := it.node
		if n == nil {
			n = extKey
		}
		switch it.kind {
		case "header":
			prm, ok := findParam(o.Params, "header", it.name)
			if !ok {
				errorf(n, RuleScopeParamMissing, "x-idempotency.scope: header:%s is not a header parameter of the operation or its path item%s (declare it under parameters, or remove it from scope)", it.name, note(scopeDefs))
				continue
			}
			p.Scope = append(p.Scope, model.ScopeItem{Kind: it.kind, Name: prm.Name})
		case "path":
			if _, ok := findParam(o.Params, "path", it.name); !ok {
				errorf(n, RuleScopeParamMissing, "x-idempotency.scope: path:%s is not a path parameter of %s%s (%s)", it.name, o.Path, note(scopeDefs), pathParamHint(o.Params))
				continue
			}
			p.Scope = append(p.Scope, model.ScopeItem{Kind: it.kind, Name: it.name})
		default:
			p.Scope = append(p.Scope, model.ScopeItem{Kind: it.kind})
		}
	}

	b.resolveKey(o, p, raw.key, defs.key, extKey, errorf)
	if !p.NoFingerprint {
		// With the fingerprint off there is nothing to exclude from, so exclusions inherited from
		// the document defaults are neither applied nor checked against this operation.
		resolveExclude(o, p, exclude, excludeDefs, errorf)
	}

	if p.Wait > p.Lease {
		errorf(waitNode, RuleWaitExceedsLease, "x-idempotency.wait: %s is longer than the lease (%s): a duplicate would still be waiting when the first request's claim can be taken over (use a wait shorter than the lease)%s", model.FormatDuration(p.Wait), model.FormatDuration(p.Lease), note(waitDefs))
	}
	if p.TTL < p.Lease {
		errorf(ttlNode, RuleTTLShorterThanLease, "x-idempotency.ttl: %s is shorter than the lease (%s): a completed key is forgotten before a retry of a slow request arrives, and the retry runs again (use a ttl of at least the lease)%s", model.FormatDuration(p.TTL), model.FormatDuration(p.Lease), note(ttlDefs))
	}

	if p.Storage == model.StorageMarker && p.NoFingerprint {
		errorf(printNode, RuleMarkerNeedsPrint, "x-idempotency.fingerprint: storage marker keeps only the status and the fingerprint, so the fingerprint cannot be off%s (remove fingerprint: false, or use storage: response)", note(printDefs))
	}
	if p.Storage != model.StorageResponse {
		anySuccess, withBody := successResponses(op)
		switch {
		case p.Storage == model.StorageReference && !withBody:
			errorf(storageNode, RuleReplayImpossible, "x-idempotency.storage: reference replays by reloading the resource into a 2xx response with a body, and the operation declares none%s (declare one, or use storage: response)", note(storageDefs))
		case p.Storage == model.StorageMarker && !anySuccess:
			errorf(storageNode, RuleReplayImpossible, "x-idempotency.storage: marker replays by recomputing a 2xx response, and the operation declares none%s (declare one, or use storage: response)", note(storageDefs))
		}
	}
	if p.Storage == model.StorageResponse {
		if where := unboundedSuccess(op); where != "" {
			errorf(storageNode, RuleResponseUnbounded, "x-idempotency.storage: response stores the 2xx body whole, and %s has no size bound: a body over the store's limit (idem.Config.MaxStoredBody, 1 MiB by default) is answered but stored without it, and replays come back empty (bound it with maxItems/maxLength, raise the limit, or use storage: reference)%s", where, note(storageDefs))
		}
	}
	if safeMethod(o.Method) {
		errorf(extKey, RuleSafeMethod, "x-idempotency on %s: the method is safe, so retries are already harmless and the key store only adds a write (remove x-idempotency)", o.Method)
	}
	return p
}

// resolveExclude splits fingerprint.exclude into body pointers and parameters, and checks that
// each parameter is declared and may be left out. A path parameter may not: it names the resource,
// and a retry of the key against another resource would be replayed this one's outcome. The key
// header is never fingerprinted, so excluding it would suggest a protection that is not there.
func resolveExclude(o *model.Operation, p *model.Policy, items []excludeItem, fromDefs bool, errorf func(*yaml.Node, string, string, ...any)) {
	const field = "x-idempotency.fingerprint.exclude"
	for _, it := range items {
		switch it.kind {
		case "body":
			p.Exclude = append(p.Exclude, it.name)
		case "path":
			errorf(it.node, RuleFingerprintParamDenied, "%s: path:%s cannot be excluded: a path parameter names the resource, and a retry against another resource would be answered with this one's outcome%s (remove it)", field, it.name, note(fromDefs))
		case "header":
			if p.Key.Header != "" && strings.EqualFold(it.name, p.Key.Header) {
				errorf(it.node, RuleFingerprintParamDenied, "%s: header:%s is the idempotency key, which is never part of the fingerprint%s (remove it)", field, it.name, note(fromDefs))
				continue
			}
			prm, ok := findParam(o.Params, "header", it.name)
			if !ok {
				errorf(it.node, RuleFingerprintParamMissing, "%s: header:%s is not a header parameter of the operation or its path item, and only declared headers are fingerprinted%s (declare it under parameters, or remove it from exclude)", field, it.name, note(fromDefs))
				continue
			}
			p.ExcludeParams = append(p.ExcludeParams, model.ParamRef{In: "header", Name: prm.Name})
		case "query":
			if _, ok := findParam(o.Params, "query", it.name); !ok {
				errorf(it.node, RuleFingerprintParamMissing, "%s: query:%s is not a query parameter of the operation or its path item%s (%s)", field, it.name, note(fromDefs), queryParamHint(o.Params))
				continue
			}
			p.ExcludeParams = append(p.ExcludeParams, model.ParamRef{In: "query", Name: it.name})
		}
	}
}

// queryParamHint lists the query parameters an exclusion could have meant; names are exact.
func queryParamHint(ps []model.Param) string {
	var names []string
	for _, p := range ps {
		if p.In == "query" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "it declares no query parameters; remove it from exclude"
	}
	return "names are case-sensitive; use one of: " + strings.Join(names, ", ")
}

func (b *builder) resolveKey(o *model.Operation, p *model.Policy, op, defs rawKey, extKey *yaml.Node, errorf func(*yaml.Node, string, string, ...any)) {
	// header and from are one choice: the operation's, else the defaults', else the built-in header.
	src, srcDefs := op, false
	if !op.header.ok && !op.from.ok {
		src, srcDefs = defs, true
	}
	switch {
	case src.from.ok:
		n := src.from.node
		if _, ok := findParam(o.Params, "path", src.from.v); !ok {
			errorf(n, RuleKeyParamMissing, "x-idempotency.key.from: path:%s is not a path parameter of %s%s (%s)", src.from.v, o.Path, note(srcDefs), pathParamHint(o.Params))
		}
		p.Key.PathParam = src.from.v
	default:
		name, n, fromDefs := defaultKeyHeader, extKey, false
		if src.header.ok {
			name, n, fromDefs = src.header.v, src.header.node, srcDefs
		}
		if prm, ok := findParam(o.Params, "header", name); ok {
			name = prm.Name
		} else if alt := keyLikeHeader(o.Params); alt != "" {
			errorf(n, RuleKeyHeaderUndeclared, "x-idempotency.key.header: %s is not declared as a header parameter of the operation or its path item, but %s is (set key: {header: %s}, or declare %s)%s", name, alt, alt, name, note(fromDefs))
		} else {
			errorf(n, RuleKeyHeaderUndeclared, "x-idempotency.key.header: %s is not declared as a header parameter of the operation or its path item%s (add {name: %s, in: header, schema: {type: string}} under parameters; idemgen annotate does it)", name, note(fromDefs), name)
		}
		p.Key.Header = name
	}
	p.Key.Required, _, _ = pick(op.required, defs.required, true, extKey)
	if p.Key.PathParam != "" {
		p.Key.Required = true
	}
	p.Key.MaxLength, _, _ = pick(op.maxLength, defs.maxLength, maxKeyLength, extKey)
	p.Key.Pattern, _, _ = pick(op.pattern, defs.pattern, "", extKey)
}

func findParam(ps []model.Param, in, name string) (model.Param, bool) {
	for _, p := range ps {
		if sameParam(p, model.Param{In: in, Name: name}) {
			return p, true
		}
	}
	return model.Param{}, false
}

// pathParamHint lists the path parameters a reference could have meant.
func pathParamHint(ps []model.Param) string {
	var names []string
	for _, p := range ps {
		if p.In == "path" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "the path has no parameters"
	}
	return "use one of: " + strings.Join(names, ", ")
}

// successResponses reports whether op declares a 2xx response (a code or the 2XX range), and
// whether one of those has a body.
func successResponses(op *openapi3.Operation) (anySuccess, withBody bool) {
	if op.Responses == nil {
		return false, false
	}
	for code, ref := range op.Responses.Map() {
		if len(code) != 3 || code[0] != '2' {
			continue
		}
		anySuccess = true
		if ref != nil && ref.Value != nil && len(ref.Value.Content) > 0 {
			withBody = true
		}
	}
	return anySuccess, withBody
}

// unboundedSuccess names the first place in a 2xx response body that can grow without bound
// (an array without maxItems, a string without maxLength that is binary or a byte stream, a
// media type with no schema), or "" when every success body is bounded. It looks into object
// properties a few levels deep; a $ref cycle stops the walk.
func unboundedSuccess(op *openapi3.Operation) string {
	if op.Responses == nil {
		return ""
	}
	codes := make([]string, 0, op.Responses.Len())
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	for _, code := range codes {
		ref := op.Responses.Value(code)
		if len(code) != 3 || code[0] != '2' || ref == nil || ref.Value == nil {
			continue
		}
		types := make([]string, 0, len(ref.Value.Content))
		for mt := range ref.Value.Content {
			types = append(types, mt)
		}
		sort.Strings(types)
		for _, mt := range types {
			media := ref.Value.Content[mt]
			where := fmt.Sprintf("the %s response (%s)", code, mt)
			if media == nil || media.Schema == nil || media.Schema.Value == nil {
				if model.ClassifyMediaType(mt) != model.BodyJSON {
					return where + " body"
				}
				continue
			}
			if at := unboundedSchema(media.Schema.Value, "", 0, map[*openapi3.Schema]bool{}); at != "" {
				return where + " at " + at
			}
		}
	}
	return ""
}

func unboundedSchema(s *openapi3.Schema, at string, depth int, seen map[*openapi3.Schema]bool) string {
	if s == nil || seen[s] || depth > 4 {
		return ""
	}
	seen[s] = true
	defer delete(seen, s)
	here := at
	if here == "" {
		here = "/"
	}
	switch {
	case s.Type.Is("array"):
		if s.MaxItems == nil {
			return here + " (an array without maxItems)"
		}
		if s.Items != nil {
			return unboundedSchema(s.Items.Value, at+"/0", depth+1, seen)
		}
	case s.Type.Is("string"):
		if s.MaxLength == nil && (s.Format == "binary" || s.Format == "byte") {
			return here + " (a " + s.Format + " string without maxLength)"
		}
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if p := s.Properties[name]; p != nil {
			if w := unboundedSchema(p.Value, at+"/"+name, depth+1, seen); w != "" {
				return w
			}
		}
	}
	for _, group := range [][]*openapi3.SchemaRef{s.AllOf, s.OneOf, s.AnyOf} {
		for _, sub := range group {
			if sub != nil {
				if w := unboundedSchema(sub.Value, at, depth+1, seen); w != "" {
					return w
				}
			}
		}
	}
	return ""
}

// looksLikeKeyHeader spots headers that real specs use for idempotency keys: Idempotency-Key in
// any spelling or prefix, and vendor *-Request-Id headers (PayPal-Request-Id). X-Request-Id and
// Request-Id are left out: they are the common tracing headers, not keys.
func looksLikeKeyHeader(name string) bool {
	l := strings.ToLower(name)
	if strings.Contains(l, "idempoten") {
		return true
	}
	return strings.HasSuffix(l, "-request-id") && l != "x-request-id"
}

// keyLikeHeader returns the first declared header that looks like an idempotency key, or "".
func keyLikeHeader(ps []model.Param) string {
	for _, p := range ps {
		if p.In == "header" && looksLikeKeyHeader(p.Name) {
			return p.Name
		}
	}
	return ""
}

func (b *builder) unusedKeyHeaders(o *model.Operation) {
	// A path item may declare the key header for all its methods; on a safe method without a
	// policy it is simply not needed there.
	if o.Policy == nil && safeMethod(o.Method) {
		return
	}
	for _, prm := range o.Params {
		if prm.In != "header" || !looksLikeKeyHeader(prm.Name) {
			continue
		}
		pos := prm.Pos
		d := Diagnostic{Pos: pos, Severity: SeverityWarning, Rule: RuleKeyHeaderUnused, Operation: o.Route()}
		switch {
		case o.Policy == nil:
			d.Message = fmt.Sprintf("header %s looks like an idempotency key, but the operation has no x-idempotency, so it is ignored (add x-idempotency: {key: {header: %s}}, or x-idempotency: false to opt out on purpose)", prm.Name, prm.Name)
		case o.Policy.Key.Header == "" || !strings.EqualFold(o.Policy.Key.Header, prm.Name):
			using := o.Policy.Key.Header
			if using == "" {
				using = "path:" + o.Policy.Key.PathParam
			}
			d.Message = fmt.Sprintf("header %s looks like an idempotency key, but the key comes from %s (set x-idempotency.key.header: %s, or remove the parameter)", prm.Name, using, prm.Name)
		default:
			continue
		}
		b.diags = append(b.diags, d)
	}
}

// conflictShared warns when an idempotent operation declares a 409 of its own (out of stock, a
// state conflict): the runtime answers a duplicate that arrives while the first request is still
// running with 409 in-progress, and a reused key with 409 too when mismatchStatus is 409, so the
// status alone no longer tells a client which happened. A 409 whose description already names
// the in-progress answer (annotate's IdempotencyProblem does) is taken as documenting both.
func (b *builder) conflictShared(o *model.Operation, op *openapi3.Operation, opNode, anchor *yaml.Node) {
	if op.Responses == nil {
		return
	}
	ref := op.Responses.Value("409")
	if ref == nil || ref.Value == nil {
		return
	}
	if d := ref.Value.Description; d != nil {
		l := strings.ToLower(*d)
		if strings.Contains(l, "in-progress") || strings.Contains(l, "in progress") {
			return
		}
	}
	n := anchor
	if _, responses := lookup(opNode, "responses"); responses != nil {
		if k, _ := lookup(responses, "409"); k != nil {
			n = k
		}
	}
	also := `a duplicate of a request still running (problem code "in-progress")`
	if o.Policy.MismatchStatus == 409 {
		also += ` and a key reused with another request (code "key-reused", since mismatchStatus is 409)`
	}
	b.report(n, RuleConflictStatusShared, o.Route(), fmt.Sprintf("responses.409: this 409 now also answers %s; clients tell them apart by the problem's code, not the status (say so in the response's description, or give the operation's own conflict another status)", also))
}

func safeMethod(m string) bool { return m == "GET" || m == "HEAD" || m == "OPTIONS" }
