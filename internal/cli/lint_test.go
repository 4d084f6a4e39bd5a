package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemgen/idemgen/internal/lint/sariftest"
)

func lintRun(args ...string) (code int, stdout, stderr string) {
	return runMain("", append([]string{"lint"}, args...)...)
}

// lintFinding is what every format must carry for one diagnostic.
type lintFinding struct {
	Line, Col      int
	Severity, Rule string
	Operation      string
}

// testdata/lint/errors.json holds two errors and a warning, at these places.
const lintErrorsFile = "testdata/lint/errors.json"

var lintErrorsFindings = []lintFinding{
	{7, 9, "error", "key-header-undeclared", "POST /v1/payments"},
	{7, 34, "error", "duration-invalid", "POST /v1/payments"},
	{17, 9, "warning", "safe-method", "GET /v1/payments/{id}"},
}

func TestLintText(t *testing.T) {
	t.Parallel()
	code, out, errOut := lintRun(lintErrorsFile)
	want := `testdata/lint/errors.json:7:9: error: POST /v1/payments: x-idempotency.key.header: Idempotency-Key is not declared as a header parameter of the operation or its path item (add {name: Idempotency-Key, in: header, schema: {type: string}} under parameters; idemgen annotate does it) [key-header-undeclared]
testdata/lint/errors.json:7:34: error: POST /v1/payments: x-idempotency.ttl: "5x" is not a duration (use e.g. 24h or 3d) [duration-invalid]
testdata/lint/errors.json:17:9: warning: GET /v1/payments/{id}: x-idempotency on GET: the method is safe, so retries are already harmless and the key store only adds a write (remove x-idempotency) [safe-method]
`
	if code != ExitFindings {
		t.Errorf("exit %d, want %d", code, ExitFindings)
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if errOut != "testdata/lint/errors.json: 2 errors, 1 warning\n" {
		t.Errorf("stderr = %q, want the summary line", errOut)
	}
}

func TestLintJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := lintRun(lintErrorsFile, "--format", "json")
	if code != ExitFindings || errOut != "" {
		t.Errorf("exit %d, stderr %q; want %d and nothing", code, errOut, ExitFindings)
	}
	var got []struct {
		File, Severity, Rule, Operation, Message string
		Line, Column                             int
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var findings []lintFinding
	for _, g := range got {
		if g.File != lintErrorsFile || g.Message == "" {
			t.Errorf("finding %+v: want file %s and a message", g, lintErrorsFile)
		}
		findings = append(findings, lintFinding{g.Line, g.Column, g.Severity, g.Rule, g.Operation})
	}
	if diff := cmp.Diff(lintErrorsFindings, findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

// TestLintSARIF validates the output against sariftest.Schema, a
// hand-written subset of the official SARIF 2.1.0 schema (see internal/lint).
func TestLintSARIF(t *testing.T) {
	t.Parallel()
	code, out, errOut := lintRun(lintErrorsFile, "--format", "sarif")
	if code != ExitFindings || errOut != "" {
		t.Errorf("exit %d, stderr %q; want %d and nothing", code, errOut, ExitFindings)
	}
	sch := sariftest.Schema(t)
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("SARIF does not validate: %v", err)
	}
	var log struct {
		Version string
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string
					Rules []struct{ ID string }
				}
			}
			Results []struct {
				RuleID    string
				Level     string
				Message   struct{ Text string }
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct{ URI string }
						Region           struct{ StartLine, StartColumn int }
					}
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || len(log.Runs) != 1 || log.Runs[0].Tool.Driver.Name != "idemgen" || len(log.Runs[0].Tool.Driver.Rules) == 0 {
		t.Fatalf("want version 2.1.0 and one run by idemgen with its rules:\n%s", out)
	}
	var findings []lintFinding
	for _, r := range log.Runs[0].Results {
		loc := r.Locations[0].PhysicalLocation
		if loc.ArtifactLocation.URI != lintErrorsFile {
			t.Errorf("uri %q, want %q", loc.ArtifactLocation.URI, lintErrorsFile)
		}
		op, _, _ := strings.Cut(r.Message.Text, ": ")
		findings = append(findings, lintFinding{loc.Region.StartLine, loc.Region.StartColumn, r.Level, r.RuleID, op})
	}
	if diff := cmp.Diff(lintErrorsFindings, findings); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}

func TestLintExitCodes(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs("testdata/lint/warnings.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		code       int
		out        string // substring of stdout
		err        string // substring of stderr
		outIsEmpty bool
	}{
		{"clean", []string{"testdata/lint/clean.yaml"}, ExitOK, "", "testdata/lint/clean.yaml: no findings", true},
		{"clean fail-on warning", []string{"testdata/lint/clean.yaml", "--fail-on", "warning"}, ExitOK, "", "no findings", true},
		{"clean json", []string{"testdata/lint/clean.yaml", "--format", "json"}, ExitOK, "[]\n", "", false},
		{"warnings below fail-on", []string{"testdata/lint/warnings.yaml"}, ExitOK, "warning: POST /v1/payments", "0 errors, 1 warning", false},
		{"warnings at fail-on", []string{"testdata/lint/warnings.yaml", "--fail-on", "warning"}, ExitFindings, "[post-without-idempotency]", "0 errors, 1 warning", false},
		{"absolute path printed relative", []string{abs}, ExitOK, "testdata/lint/warnings.yaml:5:5: warning:", "", false},
		{"errors with fail-on warning", []string{lintErrorsFile, "--fail-on", "warning"}, ExitFindings, "[duration-invalid]", "", false},
		{"unloadable", []string{"testdata/lint/unloadable.yaml"}, ExitUsage, "", "idemgen: testdata/lint/unloadable.yaml:10:19: kin-openapi cannot load it as an OpenAPI 3 document", true},
		{"missing file", []string{"testdata/lint/nope.yaml"}, ExitUsage, "", "idemgen: testdata/lint/nope.yaml: cannot read the spec: no such file or directory", true},
		{"unloadable sarif", []string{"testdata/lint/unloadable.yaml", "--format", "sarif"}, ExitUsage, "", "cannot load", true},
		{"bad format", []string{"testdata/lint/clean.yaml", "--format", "xml"}, ExitUsage, "", `--format "xml" is not a format (use text, json, sarif)`, true},
		{"bad fail-on", []string{"testdata/lint/clean.yaml", "--fail-on", "info"}, ExitUsage, "", `--fail-on "info" is not a severity (use error or warning)`, true},
		{"no spec", nil, ExitUsage, "", "lint needs SPEC", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := lintRun(tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			if !strings.Contains(out, tc.out) || (tc.outIsEmpty && out != "") {
				t.Errorf("stdout %q, want it to contain %q (empty: %v)", out, tc.out, tc.outIsEmpty)
			}
			if !strings.Contains(errOut, tc.err) {
				t.Errorf("stderr %q, want it to contain %q", errOut, tc.err)
			}
		})
	}
}
