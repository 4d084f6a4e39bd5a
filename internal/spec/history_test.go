package spec

import (
	"testing"

	"github.com/idemgen/idemgen/internal/policy"
)

const historySpec = `openapi: 3.0.3
info: {title: t, version: "1"}
x-idempotency:
  history: true
paths:
  /a:
    post:
      operationId: a
      x-idempotency: true
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses: {"201": {description: ok}}
  /b:
    post:
      operationId: b
      x-idempotency: {history: false}
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses: {"201": {description: ok}}
  /c:
    post:
      operationId: c
      x-idempotency: {history: false, uncertainOnLoss: true}
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses: {"201": {description: ok}}
`

// TestHistoryAndUncertainOnLoss: history is inherited from the document's defaults and
// overridden per operation; uncertainOnLoss implies history, whatever history says; a config
// override sets both in every idempotent operation.
func TestHistoryAndUncertainOnLoss(t *testing.T) {
	t.Parallel()
	policies := func(opts *LoadOpts) map[string]*policy.Policy {
		t.Helper()
		s, err := LoadData("openapi.yaml", []byte(historySpec), opts)
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
		return got
	}
	got := policies(nil)
	for id, want := range map[string][2]bool{"a": {true, false}, "b": {false, false}, "c": {true, true}} {
		if p := got[id]; p.History != want[0] || p.UncertainOnLoss != want[1] {
			t.Errorf("%s: history %v, uncertainOnLoss %v; want %v, %v", id, p.History, p.UncertainOnLoss, want[0], want[1])
		}
	}

	over, diags := parseOverride(t, "{uncertainOnLoss: true}")
	if len(diags) != 0 {
		t.Fatalf("override: %v", diags)
	}
	for id, p := range policies(&LoadOpts{Override: over}) {
		if !p.History || !p.UncertainOnLoss {
			t.Errorf("%s under the override: history %v, uncertainOnLoss %v; want both", id, p.History, p.UncertainOnLoss)
		}
	}

	_, diags = parseOverride(t, "{history: sometimes}")
	if len(diags) != 1 || diags[0].Rule != policy.RuleTypeInvalid || diags[0].Message != `override.history: expected true or false, got "sometimes"` ||
		diags[0].Pos.Line != 1 || diags[0].Pos.Col != 11 {
		t.Errorf("override {history: sometimes}: %v; want one type-invalid at 1:11 naming override.history", diags)
	}
}
