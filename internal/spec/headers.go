package spec

import (
	"sort"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
)

// responseHeaders lists the headers op's responses declare, by status, then name, each at its
// key in the file (a response or header that is a $ref points at the response's status, or at
// anchor when the operation's responses are not in this file).
func responseHeaders(file string, op *openapi3.Operation, opNode, anchor *yaml.Node) []model.ResponseHeader {
	if op.Responses == nil {
		return nil
	}
	_, respNode := lookup(opNode, "responses")
	codes := make([]string, 0, op.Responses.Len())
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	var out []model.ResponseHeader
	for _, code := range codes {
		ref := op.Responses.Value(code)
		if ref == nil || ref.Value == nil || len(ref.Value.Headers) == 0 {
			continue
		}
		codeKey, codeNode := lookup(respNode, code)
		_, headersNode := lookup(codeNode, "headers")
		names := make([]string, 0, len(ref.Value.Headers))
		for name := range ref.Value.Headers {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			at := anchor
			if codeKey != nil {
				at = codeKey
			}
			if k, _ := lookup(headersNode, name); k != nil {
				at = k
			}
			out = append(out, model.ResponseHeader{Status: code, Name: name, Pos: posOf(file, at)})
		}
	}
	return out
}
