package spec

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

const overrideSpec = `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency:
  claim: lease
  ttl: 48h
paths:
  /a:
    post:
      operationId: a
      x-idempotency: {claim: lease, wait: 2s}
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses: {"201": {description: ok}}
  /b:
    post:
      operationId: b
      x-idempotency: true
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses: {"201": {description: ok}}
  /c:
    post:
      operationId: c
      x-idempotency: false
      responses: {"201": {description: ok}}
`

func parseOverride(t *testing.T, src string) (*policy.Raw, []Diagnostic) {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		t.Fatal(err)
	}
	return ParseOverride("idemgen.yaml", "override", n.Content[0])
}

// TestOverride: an override replaces the fields it sets in every idempotent operation, over the
// operation's own value and the document's default, leaves the other fields as the spec says,
// and makes no operation idempotent that was not.
func TestOverride(t *testing.T) {
	t.Parallel()
	over, diags := parseOverride(t, "{claim: transaction}")
	if len(diags) != 0 {
		t.Fatalf("override {claim: transaction}: %v", diags)
	}
	s, err := LoadData("openapi.yaml", []byte(overrideSpec), &LoadOpts{Override: over})
	if err != nil {
		t.Fatal(err)
	}
	if s.HasErrors() {
		t.Fatalf("diagnostics: %v", s.Diagnostics)
	}
	got := map[string]*policy.Policy{}
	for _, o := range s.Model.Idempotent() {
		got[o.ID] = o.Policy
	}
	if len(got) != 2 || got["a"] == nil || got["b"] == nil {
		t.Fatalf("idempotent operations %v; want a and b only", got)
	}
	for id, p := range got {
		if p.Claim != policy.ClaimTransaction || p.TTL.Hours() != 48 {
			t.Errorf("%s: claim %s, ttl %s; want transaction (the override) and 48h (the document's)", id, p.Claim, p.TTL)
		}
	}
	if got["a"].Wait.Seconds() != 2 {
		t.Errorf("a: wait %s; want the operation's own 2s", got["a"].Wait)
	}

	// Without the override the spec is as written.
	s, err = LoadData("openapi.yaml", []byte(overrideSpec), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range s.Model.Idempotent() {
		if o.Policy.Claim != policy.ClaimLease {
			t.Errorf("%s without an override: claim %s; want lease", o.ID, o.Policy.Claim)
		}
	}
}

// TestOverrideErrors: an override's values are checked as x-idempotency's are, reported at their
// place in the config file under the override key's name; a rule that needs the merged policy
// names the config file's line too.
func TestOverrideErrors(t *testing.T) {
	t.Parallel()
	_, diags := parseOverride(t, "claim: sometimes\nttl: forever\n")
	if len(diags) != 2 || !strings.HasPrefix(diags[0].String(), "idemgen.yaml:1:8: override.claim: ") ||
		!strings.HasPrefix(diags[1].String(), "idemgen.yaml:2:6: override.ttl: ") {
		t.Errorf("diagnostics %v; want override.claim at 1:8 and override.ttl at 2:6", diags)
	}
	over, diags := parseOverride(t, "lease: 1s\n")
	if len(diags) != 0 {
		t.Fatal(diags)
	}
	s, err := LoadData("openapi.yaml", []byte(overrideSpec), &LoadOpts{Override: over})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range s.Diagnostics {
		if d.Rule == policy.RuleWaitExceedsLease && d.Pos.File == "openapi.yaml" && d.Operation == "POST /a" {
			found = true
		}
	}
	if !found || !s.HasErrors() {
		t.Errorf("a 1s lease under a's 2s wait: diagnostics %v; want wait-exceeds-lease on POST /a", s.Diagnostics)
	}
}
