package spec

import (
	"mime"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// localRef follows a same-document $ref ("#/components/responses/Error") in the node tree; nil
// when it is not local or does not resolve.
func (b *builder) localRef(ref string) *yaml.Node {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	n := b.tree
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, tok := range strings.Split(ptr, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, n = lookup(n, tok); n == nil {
			return nil
		}
	}
	return n
}

// response returns the status key of code in the operation's responses and the response's own
// mapping, a local $ref followed (nil when it cannot be found in this file).
func (b *builder) response(opNode *yaml.Node, code string) (key, val *yaml.Node) {
	_, responses := lookup(opNode, "responses")
	key, val = lookup(responses, code)
	for i := 0; i < 8 && val != nil; i++ {
		_, r := lookup(val, "$ref")
		if !isString(r) {
			break
		}
		val = b.localRef(r.Value)
	}
	return key, val
}

// declaredResponses lists, for policy.Lint, the responses op declares in the order of their
// status keys, each at its key in this file (anchor when it is elsewhere).
func (b *builder) declaredResponses(op *openapi3.Operation, opNode, anchor *yaml.Node) []policy.DeclaredResponse {
	var out []policy.DeclaredResponse
	for _, code := range sortedCodes(op) {
		ref := op.Responses.Value(code)
		if ref == nil || ref.Value == nil {
			continue
		}
		n := anchor
		if k, _ := b.response(opNode, code); k != nil {
			n = k
		}
		r := policy.DeclaredResponse{Status: code, Pos: posOf(b.file, n), Headers: sortedKeys(ref.Value.Headers), NonProblemBody: NonProblemBody(ref)}
		if ref.Value.Description != nil {
			r.Description = *ref.Value.Description
		}
		out = append(out, r)
	}
	return out
}

// sortedCodes returns the status keys of op's responses in order.
func sortedCodes(op *openapi3.Operation) []string {
	if op.Responses == nil {
		return nil
	}
	codes := make([]string, 0, op.Responses.Len())
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	return codes
}

// NonProblemBody describes the body a response declares ("schema Error (application/json)", or
// its media types when the schema is inline) when none of its media types is
// application/problem+json; "" when one is, or when it declares no content.
func NonProblemBody(ref *openapi3.ResponseRef) string {
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return ""
	}
	types := make([]string, 0, len(ref.Value.Content))
	for mt := range ref.Value.Content {
		types = append(types, mt)
	}
	sort.Strings(types)
	if slices.ContainsFunc(types, IsProblemMediaType) {
		return ""
	}
	what := strings.Join(types, ", ")
	if media := ref.Value.Content[types[0]]; media != nil && media.Schema != nil && media.Schema.Ref != "" {
		what = "schema " + media.Schema.Ref[strings.LastIndex(media.Schema.Ref, "/")+1:] + " (" + what + ")"
	}
	return what
}

// IsProblemMediaType reports whether mt (parameters allowed) is application/problem+json.
func IsProblemMediaType(mt string) bool {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		base = strings.ToLower(strings.TrimSpace(mt))
	}
	return base == idemwire.MediaTypeProblem
}
