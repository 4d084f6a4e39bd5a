package annotate

import (
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// TestProblemSchemaListsEveryCode: the problem schema annotate writes documents every code the
// runtime answers with, taken from the runtime's own table, so a new code cannot be left out;
// all but signature-invalid, which only webhook receivers answer.
func TestProblemSchemaListsEveryCode(t *testing.T) {
	t.Parallel()
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /orders:
    post:
      operationId: createOrder
      responses:
        '201': {description: Created.}
`
	res, err := Annotate("spec.yaml", []byte(spec), Options{})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(res.Output)
	if err != nil {
		t.Fatalf("the annotated spec does not load: %v\n%s", err, res.Output)
	}
	schema := doc.Components.Schemas[ProblemSchemaName]
	if schema == nil || schema.Value == nil {
		t.Fatalf("no %s schema in the annotated spec:\n%s", ProblemSchemaName, res.Output)
	}
	codes := idemhttp.ProblemCodes()
	if len(codes) < 13 {
		t.Fatalf("idemhttp.ProblemCodes() = %v; want every code", codes)
	}
	for _, code := range codes {
		if code == idemhttp.CodeSignatureInvalid {
			// Only webhook receivers answer it, and annotate gives them no problem responses.
			if strings.Contains(schema.Value.Description, code) {
				t.Errorf("the problem schema's description %q lists %s, which only webhook receivers answer", schema.Value.Description, code)
			}
			continue
		}
		if !strings.Contains(schema.Value.Description, code) {
			t.Errorf("the problem schema's description %q does not list %s", schema.Value.Description, code)
		}
	}
}
