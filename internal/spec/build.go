package spec

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
)

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
	defs  *policy.Raw // document-level defaults; nil when absent or invalid
	acks  []Acknowledgement
	// override replaces the fields it sets in every operation's policy (LoadOpts.Override).
	override *policy.Raw
}

// lintSettings reads the x-idempotency-lint extension of the mapping m (the root, or the
// operation route's mapping), if it has one.
func (b *builder) lintSettings(m *yaml.Node, route string) {
	k, v := lookup(m, LintExtension)
	if k == nil {
		return
	}
	acks, diags := ParseLintSettings(b.file, LintExtension, v, route)
	for i := range acks {
		acks[i].InSpec = true
	}
	b.acks = append(b.acks, acks...)
	b.diags = append(b.diags, diags...)
}

// report adds a diagnostic at n; n may be nil only for positions that cannot be known.
func (b *builder) report(n *yaml.Node, rule, op, msg string) {
	b.diags = append(b.diags, policy.NewDiagnostic(posOf(b.file, n), rule, op, msg))
}

func (b *builder) build() *model.Document {
	d := &model.Document{File: b.file, Operations: []*model.Operation{}}
	if k, v := lookup(b.tree, "x-idempotency"); k != nil {
		if v != nil && v.Kind == yaml.MappingNode {
			b.defs = (&checker{b: b}).parsePolicy(v)
		} else {
			b.report(v, policy.RuleRootInvalid, "", fmt.Sprintf("x-idempotency: at the document root it must be a mapping of defaults such as {ttl: 48h}, got %s (mark each operation with x-idempotency: true instead)", show(v)))
		}
	}
	b.lintSettings(b.tree, "")
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
	b.lintSettings(opNode, route)
	o.Params = b.params(item, op, itemNode, opNode, anchor)
	o.Body, o.BodyTypes = bodyKind(op.RequestBody)
	o.Responses = responses(op)
	o.ResponseHeaders = b.responseHeaders(op, opNode, anchor)

	extKey, ext := lookup(opNode, "x-idempotency")
	if extKey == nil {
		if v, ok := op.Extensions["x-idempotency"]; ok {
			extKey, ext = anchor, fromValue(v, anchor)
		}
	}
	explicitOff := false
	var raw *policy.Raw
	switch {
	case extKey == nil:
	case isScalar(ext) && ext.Tag == "!!bool":
		if ext.Value == "true" {
			raw = &policy.Raw{}
		} else {
			explicitOff = true
		}
	case ext != nil && ext.Kind == yaml.MappingNode:
		raw = (&checker{b: b, op: route}).parsePolicy(ext)
	default:
		b.report(ext, policy.RuleTypeInvalid, route, fmt.Sprintf("x-idempotency: expected true, false or a mapping, got %s", show(ext)))
	}
	if raw != nil {
		raw = overlay(raw, b.override)
		var diags []policy.Diagnostic
		o.Policy, diags = policy.Resolve(policy.Input{Raw: raw, Defaults: b.defs, Op: o.Input(), Pos: posOf(b.file, extKey)})
		b.diags = append(b.diags, diags...)
	}
	b.diags = append(b.diags, policy.Lint(&policy.LintInput{
		Route: route, Method: method, Pos: o.Pos,
		Missing: extKey == nil, Off: explicitOff,
		Policy: o.Policy, Params: o.Params,
		Responses: b.declaredResponses(op, opNode, anchor), ResponseHeaders: o.ResponseHeaders,
	})...)
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
			b.paramRules(&p, ref.Value, list, i)
			replaced := false
			for j := range out {
				if policy.SameParam(out[j], p) {
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

// paramRules reads the parameter's schema rules that a key header's policy takes over: its
// maxLength and pattern, with their places (the parameter's own place when the schema is not in
// this file's node tree).
func (b *builder) paramRules(p *model.Param, prm *openapi3.Parameter, list *yaml.Node, i int) {
	if prm.Schema == nil || prm.Schema.Value == nil {
		return
	}
	sc := prm.Schema.Value
	if sc.MaxLength != nil && *sc.MaxLength <= uint64(math.MaxInt32) {
		p.MaxLength = int(*sc.MaxLength)
	}
	p.Pattern = sc.Pattern
	if p.MaxLength == 0 && p.Pattern == "" {
		return
	}
	if p.MaxLength > 0 {
		p.MaxLengthPos = p.Pos
	}
	if p.Pattern != "" {
		p.PatternPos = p.Pos
	}
	var pn *yaml.Node
	if list != nil && list.Kind == yaml.SequenceNode && i < len(list.Content) {
		pn = resolve(list.Content[i])
		if _, r := lookup(pn, "$ref"); isString(r) {
			pn = b.localRef(r.Value)
		}
	}
	_, schema := lookup(pn, "schema")
	for j := 0; j < 8 && schema != nil; j++ {
		_, r := lookup(schema, "$ref")
		if !isString(r) {
			break
		}
		schema = b.localRef(r.Value)
	}
	if _, v := lookup(schema, "maxLength"); v != nil && p.MaxLength > 0 {
		p.MaxLengthPos = posOf(b.file, v)
	}
	if _, v := lookup(schema, "pattern"); v != nil && p.Pattern != "" {
		p.PatternPos = posOf(b.file, v)
	}
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

// responses reads what op declares of its success responses: whether there is a 2xx (a code or
// the 2XX range), whether one of those has a body, and where one can grow without bound.
func responses(op *openapi3.Operation) policy.Responses {
	var r policy.Responses
	if op.Responses == nil {
		return r
	}
	for code, ref := range op.Responses.Map() {
		if len(code) != 3 || code[0] != '2' {
			continue
		}
		r.AnySuccess = true
		if ref != nil && ref.Value != nil && len(ref.Value.Content) > 0 {
			r.SuccessBody = true
		}
	}
	r.Unbounded = unboundedSuccess(op)
	return r
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
