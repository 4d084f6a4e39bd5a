package spec

import (
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

// TestAcknowledgedFindingsAreKept: a warning the spec acknowledges leaves Diagnostics and is kept
// in Acknowledged with the acknowledgement's reason and place, so lint can still show it.
func TestAcknowledgedFindingsAreKept(t *testing.T) {
	t.Parallel()
	s, err := Load(filepath.Join("testdata", "acknowledgement-stale", "openapi.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Acknowledged) != 1 {
		t.Fatalf("Acknowledged = %+v; want the POST /v1/reports warning", s.Acknowledged)
	}
	a := s.Acknowledged[0]
	if a.Rule != policy.RulePostWithout || a.Operation != "POST /v1/reports" || a.Pos.Line != 16 ||
		!strings.HasPrefix(a.By.Reason, "reports are read-only") || a.By.Where.Line != 6 || !a.By.InSpec {
		t.Errorf("Acknowledged[0] = %+v", a)
	}
	for _, d := range s.Diagnostics {
		if d.Rule == policy.RulePostWithout {
			t.Errorf("the acknowledged warning is still a diagnostic: %s", d)
		}
	}
}

// TestAcknowledgeFromAConfigFile: acknowledgements read from a config file's lint key match by
// operationId or "METHOD /path" (any case of the method), or every operation when they name
// none; a stale one is a warning at its place in the config file; the errors stay.
func TestAcknowledgeFromAConfigFile(t *testing.T) {
	t.Parallel()
	const cfg = `lint:
  acknowledge:
    - {rule: post-without-idempotency, operation: post /v1/reports, reason: a query sent as POST}
    - {rule: post-without-idempotency, operation: POST /v1/reports, reason: said twice}
    - {rule: key-header-unused, reason: every such header is the gateway's}
`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(cfg), &doc); err != nil {
		t.Fatal(err)
	}
	_, lint := lookup(doc.Content[0], "lint")
	acks, diags := ParseLintSettings("idemgen.yaml", "lint", lint, "")
	if len(diags) > 0 || len(acks) != 3 {
		t.Fatalf("ParseLintSettings = %v, %v", acks, diags)
	}
	const spec = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /v1/reports:
    post:
      parameters:
        - {name: X-Idempotency-Key, in: header, schema: {type: string}}
      responses:
        "200": {description: ok}
  /v1/orders:
    post:
      x-idempotency: {mismatchStatus: 4}
      responses:
        "200": {description: ok}
`
	s, err := LoadData("openapi.yaml", []byte(spec), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Acknowledge(acks)
	var got []string
	for _, d := range s.Diagnostics {
		got = append(got, d.String())
	}
	want := []string{
		"idemgen.yaml:4:14: warning: POST /v1/reports: lint.acknowledge[1]: acknowledges post-without-idempotency, and the operation has no such warning (remove the acknowledgement)",
		"openapi.yaml:12:7: POST /v1/orders: x-idempotency.key.header: Idempotency-Key is not declared as a header parameter of the operation or its path item (add {name: Idempotency-Key, in: header, schema: {type: string}} under parameters; idemgen annotate does it)",
		"openapi.yaml:12:39: POST /v1/orders: x-idempotency.mismatchStatus: 4 is not allowed (use 422, 409 or 400)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(s.Acknowledged) != 2 || s.Acknowledged[0].Rule != policy.RulePostWithout || s.Acknowledged[1].Rule != policy.RuleKeyHeaderUnused ||
		s.Acknowledged[0].By.InSpec || s.Acknowledged[1].By.Where.File != "idemgen.yaml" {
		t.Errorf("Acknowledged = %+v", s.Acknowledged)
	}
}
