package policy_test

import (
	"slices"
	"testing"

	"github.com/idemgen/idemgen/internal/policy"
)

// TestLint exercises the document-level rules on facts given directly, without a document:
// which rule fires when, and at which place.
func TestLint(t *testing.T) {
	t.Parallel()
	at := func(line int) policy.Position { return policy.Position{File: "openapi.yaml", Line: line, Col: 5} }
	resolved := func(raw *policy.Raw) *policy.Policy {
		p, diags := policy.Resolve(policy.Input{Raw: raw, Op: &policy.Operation{Method: "POST", Path: "/v1/x", Params: []policy.Param{{Name: "Idempotency-Key", In: "header"}}}})
		if len(diags) > 0 {
			t.Fatalf("Resolve: %v", diags)
		}
		return p
	}
	rules := func(ds []policy.Diagnostic) (ids []string, lines []int) {
		for _, d := range ds {
			ids = append(ids, d.Rule)
			lines = append(lines, d.Pos.Line)
		}
		return ids, lines
	}
	keyLike := []policy.Param{{Name: "Idempotency-Key", In: "header", Pos: at(7)}}
	tests := []struct {
		name  string
		in    policy.LintInput
		rules []string
		lines []int
	}{
		{"POST without x-idempotency", policy.LintInput{Method: "POST", Missing: true, Pos: at(3)},
			[]string{policy.RulePostWithout}, []int{3}},
		{"unused key header", policy.LintInput{Method: "POST", Missing: true, Pos: at(3), Params: keyLike},
			[]string{policy.RulePostWithout, policy.RuleKeyHeaderUnused}, []int{3, 7}},
		{"opt-out is quiet", policy.LintInput{Method: "POST", Off: true, Pos: at(3), Params: keyLike}, nil, nil},
		{"safe method without policy", policy.LintInput{Method: "GET", Missing: true, Pos: at(3), Params: keyLike}, nil, nil},
		{"202 without Location, own 409, non-problem 400", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{}),
			Responses: []policy.DeclaredResponse{
				{Status: "202", Pos: at(10)},
				{Status: "400", Pos: at(12), NonProblemBody: "schema Error (application/json)"},
				{Status: "409", Pos: at(14), Description: "out of stock"},
			}},
			[]string{policy.RuleAcceptedWithoutLocation, policy.RuleConflictStatusShared, policy.RuleErrorNotProblem}, []int{10, 14, 12}},
		{"409 that names in-progress, 202 with Location", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{}),
			Responses: []policy.DeclaredResponse{
				{Status: "202", Pos: at(10), Headers: []string{"location"}},
				{Status: "409", Pos: at(14), Description: "Conflict, or in-progress"},
			}}, nil, nil},
		{"custom renderer", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{Renderer: policy.Field[string]{V: policy.RendererCustom, Set: true}}),
			Responses: []policy.DeclaredResponse{{Status: "409", Pos: at(14)}, {Status: "400", Pos: at(12), NonProblemBody: "text/plain"}, {Status: "5XX", Pos: at(16)}, {Status: "422", Pos: at(18)}}}, nil, nil},
		{"custom renderer, refusal statuses undeclared", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{Renderer: policy.Field[string]{V: policy.RendererCustom, Set: true}}),
			Responses: []policy.DeclaredResponse{{Status: "409", Pos: at(14)}}}, []string{policy.RuleRefusalsUndocumented}, []int{3}},
		{"custom renderer, a default response", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{Renderer: policy.Field[string]{V: policy.RendererCustom, Set: true}}),
			Responses: []policy.DeclaredResponse{{Status: "default", Pos: at(14)}}}, nil, nil},
		{"Set-Cookie on a stored response", policy.LintInput{Method: "POST", Pos: at(3), Policy: resolved(&policy.Raw{}),
			ResponseHeaders: []policy.ResponseHeader{{Status: "201", Name: "Set-Cookie", Pos: at(20)}, {Status: "500", Name: "Set-Cookie", Pos: at(22)}}},
			[]string{policy.RuleHeaderNotReplayed}, []int{20}},
	}
	for _, tt := range tests {
		ids, lines := rules(policy.Lint(&tt.in))
		if !slices.Equal(ids, tt.rules) || !slices.Equal(lines, tt.lines) {
			t.Errorf("%s: rules %v at lines %v, want %v at %v", tt.name, ids, lines, tt.rules, tt.lines)
		}
	}
}

func TestProblemCodesOn(t *testing.T) {
	t.Parallel()
	if got := policy.ProblemCodesOn(409, 422); !slices.Equal(got, []string{"in-progress"}) {
		t.Errorf("409: %v", got)
	}
	if got := policy.ProblemCodesOn(409, 409); !slices.Equal(got, []string{"key-reused", "in-progress"}) {
		t.Errorf("409 with mismatchStatus 409: %v", got)
	}
	if got := policy.ProblemCodesOn(404, 422); len(got) != 0 {
		t.Errorf("404 reaches no operation, yet %v", got)
	}
	if policy.CodesPhrase([]string{"a"}) != "code a" || policy.CodesPhrase([]string{"a", "b"}) != "codes a, b" {
		t.Error("CodesPhrase")
	}
}
