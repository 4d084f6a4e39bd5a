package lint

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemgen/idemgen/internal/lint/sariftest"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

var sample = []spec.Diagnostic{
	{Pos: model.Position{File: "api/openapi.yaml", Line: 3, Col: 16}, Severity: policy.SeverityError, Rule: policy.RuleRootInvalid,
		Message: "x-idempotency: at the document root it must be a mapping"},
	{Pos: model.Position{File: "api/openapi.yaml", Line: 42, Col: 7}, Severity: policy.SeverityWarning, Rule: policy.RuleSafeMethod,
		Operation: "GET /v1/payments", Message: `x-idempotency on GET: "quoted" <html> & more`},
}

func TestText(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := Text(&b, sample); err != nil {
		t.Fatal(err)
	}
	want := "api/openapi.yaml:3:16: error: x-idempotency: at the document root it must be a mapping [root-invalid]\n" +
		"api/openapi.yaml:42:7: warning: GET /v1/payments: x-idempotency on GET: \"quoted\" <html> & more [safe-method]\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := Summary("api/openapi.yaml", sample, 0); got != "api/openapi.yaml: 1 error, 1 warning" {
		t.Errorf("Summary = %q", got)
	}
	if got := Summary("x.yaml", nil, 0); got != "x.yaml: no findings" {
		t.Errorf("Summary(nil) = %q", got)
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := JSON(&b, sample); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"file": "api/openapi.yaml", "line": 3.0, "column": 16.0, "severity": "error", "rule": "root-invalid", "operation": "", "message": "x-idempotency: at the document root it must be a mapping"},
		{"file": "api/openapi.yaml", "line": 42.0, "column": 7.0, "severity": "warning", "rule": "safe-method", "operation": "GET /v1/payments", "message": `x-idempotency on GET: "quoted" <html> & more`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !strings.Contains(b.String(), "<html> & more") {
		t.Errorf("JSON escapes HTML, which makes messages unreadable in a terminal:\n%s", b.String())
	}
	b.Reset()
	if err := JSON(&b, nil); err != nil {
		t.Fatal(err)
	}
	if b.String() != "[]\n" {
		t.Errorf("JSON(nil) = %q, want an empty array", b.String())
	}
}

// validateSARIF checks a SARIF log against the subset schema.
func validateSARIF(t testing.TB, sch *jsonschema.Schema, data []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return sch.Validate(inst)
}

func TestSARIFValidates(t *testing.T) {
	t.Parallel()
	sch := sariftest.Schema(t)
	// Real diagnostics from every rule case, so every rule id and message shape goes through.
	var diags []spec.Diagnostic
	cases, err := filepath.Glob(filepath.Join("..", "spec", "testdata", "*", "openapi.yaml"))
	if err != nil || len(cases) < len(policy.Rules()) {
		t.Fatalf("found %d rule cases (%v)", len(cases), err)
	}
	var acked []spec.Acknowledged
	for _, c := range cases {
		s, err := spec.Load(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		diags = append(diags, s.Diagnostics...)
		acked = append(acked, s.Acknowledged...)
	}
	if len(acked) == 0 {
		t.Fatal("no rule case has an acknowledged finding; the suppressions go unchecked")
	}
	diags = append(diags, spec.Diagnostic{Pos: model.Position{File: "/abs/dir with space/x.yaml"}, Severity: policy.SeverityError, Rule: policy.RuleKeyInvalid, Message: "no position"})
	for name, ds := range map[string][]spec.Diagnostic{"findings": diags, "clean": nil} {
		var b bytes.Buffer
		var as []spec.Acknowledged
		if ds != nil {
			as = acked
		}
		if err := SARIF(&b, ds, as...); err != nil {
			t.Fatal(err)
		}
		if err := validateSARIF(t, sch, b.Bytes()); err != nil {
			t.Errorf("%s: SARIF does not validate: %v", name, err)
		}
		var log sarifLog
		if err := json.Unmarshal(b.Bytes(), &log); err != nil {
			t.Fatal(err)
		}
		if len(log.Runs) != 1 || len(log.Runs[0].Results) != len(ds)+len(as) || len(log.Runs[0].Tool.Driver.Rules) != len(policy.Rules()) {
			t.Errorf("%s: %d runs; want 1 run with %d results and %d rules", name, len(log.Runs), len(ds)+len(as), len(policy.Rules()))
			continue
		}
		for i, r := range log.Runs[0].Results {
			if suppressed := i >= len(ds); suppressed != (len(r.Suppressions) == 1) {
				t.Errorf("result %d (%s): suppressions %+v; want one exactly for the acknowledged findings", i, r.RuleID, r.Suppressions)
			}
		}
		for i, r := range log.Runs[0].Results {
			if rule := log.Runs[0].Tool.Driver.Rules[r.RuleIndex]; rule.ID != r.RuleID {
				t.Errorf("result %d: ruleIndex %d points at %s, want %s", i, r.RuleIndex, rule.ID, r.RuleID)
			}
		}
	}
}

// TestSARIFSchemaRejects shows the subset schema can fail: each mutation of a valid log breaks
// one official constraint.
func TestSARIFSchemaRejects(t *testing.T) {
	t.Parallel()
	sch := sariftest.Schema(t)
	var b bytes.Buffer
	if err := SARIF(&b, sample); err != nil {
		t.Fatal(err)
	}
	good := b.String()
	for name, bad := range map[string]string{
		"version":      strings.Replace(good, `"version": "2.1.0"`, `"version": "2.0.0"`, 1),
		"level":        strings.Replace(good, `"level": "warning",`+"\n          \"message\"", `"level": "fatal",`+"\n          \"message\"", 1),
		"startLine":    strings.Replace(good, `"startLine": 3`, `"startLine": 0`, 1),
		"unknown prop": strings.Replace(good, `"ruleId":`, `"rule_id": "x", "ruleId":`, 1),
		"no message":   strings.Replace(good, `"message": {`, `"msg": {`, 1),
		"uri":          strings.Replace(good, `"uri": "api/openapi.yaml"`, `"uri": "a b\\c:%zz"`, 1),
	} {
		if bad == good {
			t.Fatalf("%s: mutation did not apply", name)
		}
		if err := validateSARIF(t, sch, []byte(bad)); err == nil {
			t.Errorf("%s: invalid SARIF accepted", name)
		}
	}
}

func TestArtifactURI(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"openapi.yaml":          "openapi.yaml",
		"api/v1/openapi.yaml":   "api/v1/openapi.yaml",
		"my specs/openapi.yaml": "my%20specs/openapi.yaml",
		"/srv/api/openapi.yaml": "file:///srv/api/openapi.yaml",
		"a:b.yaml":              "./a:b.yaml",
		"/abs/dir with space/x": "file:///abs/dir%20with%20space/x",
	} {
		if got := artifactURI(in); got != want {
			t.Errorf("artifactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteRejectsUnknownFormat(t *testing.T) {
	t.Parallel()
	if err := Write(&bytes.Buffer{}, "xml", sample, nil); err == nil || !strings.Contains(err.Error(), "text, json, sarif") {
		t.Errorf("Write(xml) = %v; want an error naming the formats", err)
	}
}

// TestAcknowledgedOutput: acknowledged findings carry their reason and the acknowledgement's place
// in every format: a line of their own in text, an "acknowledged" member in JSON, a suppression
// in SARIF (inSource for the spec's, external for a config file's).
func TestAcknowledgedOutput(t *testing.T) {
	t.Parallel()
	acked := []spec.Acknowledged{
		{Diagnostic: sample[1], By: spec.Acknowledgement{Rule: policy.RuleSafeMethod, Reason: "a cached lookup", InSpec: true,
			Where: model.Position{File: "api/openapi.yaml", Line: 40, Col: 17}}},
		{Diagnostic: sample[1], By: spec.Acknowledgement{Rule: policy.RuleSafeMethod, Reason: "reviewed",
			Where: model.Position{File: "idemgen.yaml", Line: 5, Col: 14}}},
	}
	var b bytes.Buffer
	if err := Write(&b, "text", nil, acked[:1]); err != nil {
		t.Fatal(err)
	}
	want := "api/openapi.yaml:42:7: acknowledged warning: GET /v1/payments: x-idempotency on GET: \"quoted\" <html> & more [safe-method] (reason: a cached lookup; at api/openapi.yaml:40:17)\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	if got := Summary("api/openapi.yaml", nil, 2); got != "api/openapi.yaml: no findings (2 acknowledged)" {
		t.Errorf("Summary = %q", got)
	}

	b.Reset()
	if err := JSON(&b, sample[:1], acked[:1]...); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0]["acknowledged"] != nil {
		t.Fatalf("JSON = %v", got)
	}
	wantAck := map[string]any{"reason": "a cached lookup", "file": "api/openapi.yaml", "line": 40.0, "column": 17.0}
	if diff := cmp.Diff(wantAck, got[1]["acknowledged"]); diff != "" {
		t.Errorf("JSON acknowledged (-want +got):\n%s", diff)
	}

	b.Reset()
	if err := SARIF(&b, nil, acked...); err != nil {
		t.Fatal(err)
	}
	var log sarifLog
	if err := json.Unmarshal(b.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	rs := log.Runs[0].Results
	if len(rs) != 2 || len(rs[0].Suppressions) != 1 || len(rs[1].Suppressions) != 1 {
		t.Fatalf("SARIF results = %+v", rs)
	}
	s0, s1 := rs[0].Suppressions[0], rs[1].Suppressions[0]
	if s0.Kind != "inSource" || s0.Status != "accepted" || s0.Justification != "a cached lookup" || s0.Location.PhysicalLocation.Region.StartLine != 40 {
		t.Errorf("suppression of the spec's acknowledgement = %+v", s0)
	}
	if s1.Kind != "external" || s1.Location.PhysicalLocation.ArtifactLocation.URI != "idemgen.yaml" {
		t.Errorf("suppression of the config's acknowledgement = %+v", s1)
	}
	sch := sariftest.Schema(t)
	if err := validateSARIF(t, sch, b.Bytes()); err != nil {
		t.Errorf("SARIF with suppressions does not validate: %v", err)
	}
	bad := strings.Replace(b.String(), `"kind": "inSource"`, `"kind": "inline"`, 1)
	if bad == b.String() {
		t.Fatal("mutation did not apply")
	}
	if err := validateSARIF(t, sch, []byte(bad)); err == nil {
		t.Error("a suppression of an unknown kind is accepted")
	}
}

// TestSARIFListsUncertainNeedsLease: the driver lists uncertain-needs-lease as an error even in a
// clean run, and a finding of it points at its rule.
func TestSARIFListsUncertainNeedsLease(t *testing.T) {
	t.Parallel()
	s, err := spec.Load(filepath.Join("..", "spec", "testdata", policy.RuleUncertainNeedsLease, "openapi.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, ds := range map[string][]spec.Diagnostic{"findings": s.Diagnostics, "clean": nil} {
		var b bytes.Buffer
		if err := SARIF(&b, ds); err != nil {
			t.Fatal(err)
		}
		var log sarifLog
		if err := json.Unmarshal(b.Bytes(), &log); err != nil {
			t.Fatal(err)
		}
		rules := log.Runs[0].Tool.Driver.Rules
		i := slices.IndexFunc(rules, func(r sarifRule) bool { return r.ID == policy.RuleUncertainNeedsLease })
		if i < 0 || rules[i].DefaultConfiguration.Level != "error" {
			t.Fatalf("%s: the driver's rules do not list %s as an error", name, policy.RuleUncertainNeedsLease)
		}
		found := 0
		for _, r := range log.Runs[0].Results {
			if r.RuleID == policy.RuleUncertainNeedsLease {
				found++
				if r.RuleIndex != i || r.Level != "error" {
					t.Errorf("%s: result of %s has ruleIndex %d, level %s; want %d, error", name, r.RuleID, r.RuleIndex, r.Level, i)
				}
			}
		}
		if want := map[string]int{"findings": 2, "clean": 0}[name]; found != want {
			t.Errorf("%s: %d results of %s; want %d", name, found, policy.RuleUncertainNeedsLease, want)
		}
	}
}
