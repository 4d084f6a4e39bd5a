package spec

import (
	"slices"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
)

// responseHeaders lists the headers op's responses declare, by status, then name, each at its
// key in the file: a response that is a local $ref is followed to the header's own key; one that
// cannot be followed points at the response's status, or at anchor when the operation's
// responses are not in this file.
func (b *builder) responseHeaders(op *openapi3.Operation, opNode, anchor *yaml.Node) []model.ResponseHeader {
	var out []model.ResponseHeader
	for _, code := range sortedCodes(op) {
		ref := op.Responses.Value(code)
		if ref == nil || ref.Value == nil || len(ref.Value.Headers) == 0 {
			continue
		}
		codeKey, resp := b.response(opNode, code)
		_, headers := lookup(resp, "headers")
		for _, name := range sortedKeys(ref.Value.Headers) {
			at := anchor
			if codeKey != nil {
				at = codeKey
			}
			if k, _ := lookup(headers, name); k != nil {
				at = k
			}
			out = append(out, model.ResponseHeader{Status: code, Name: name, Pos: posOf(b.file, at)})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
