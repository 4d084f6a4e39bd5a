package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ackSpec has two warnings: a POST without x-idempotency (acknowledged in the spec) and an
// idempotent operation's own 400 that the runtime's problems share (acknowledged, when asked, in
// the config file).
const ackSpec = `openapi: 3.0.3
info: {title: acknowledged, version: "1"}
x-idempotency-lint:
  acknowledge:
    - rule: post-without-idempotency
      operation: searchPayments
      reason: a search sent as POST for its long filters; it changes nothing
paths:
  /v1/payments:
    post:
      operationId: createPayment
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
      x-idempotency: true
      responses:
        "201": {description: created}
        "400":
          description: bad
          content:
            application/json:
              schema: {type: object}
  /v1/payments/search:
    post:
      operationId: searchPayments
      responses:
        "200": {description: found}
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ackConfig(entries string) string {
	return "version: 1\nspec: openapi.yaml\noutput: api\nlint:\n  acknowledge:\n" + entries
}

const ackBadRequest = "    - rule: error-response-not-problem\n      operation: POST /v1/payments\n      reason: our client reads the Content-Type before decoding a 400\n"

func TestLintAcknowledgedInTheSpecIsQuiet(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{"openapi.yaml": ackSpec})
	spec := filepath.Join(dir, "openapi.yaml")
	code, out, errOut := lintRun(spec, "--fail-on", "warning")
	if code != ExitFindings || strings.Contains(out, "searchPayments") || strings.Contains(out, "/v1/payments/search") ||
		!strings.Contains(out, "[error-response-not-problem]") || !strings.HasSuffix(errOut, ": 0 errors, 1 warning (1 acknowledged)\n") {
		t.Errorf("exit %d\nstdout %s\nstderr %s\nwant exit 1 with only the 400 warning, and the acknowledged one counted", code, out, errOut)
	}
	code, out, _ = lintRun(spec, "--show-acknowledged")
	if code != ExitOK || !strings.Contains(out, ":23:5: acknowledged warning: POST /v1/payments/search: POST without x-idempotency") ||
		!strings.Contains(out, "(reason: a search sent as POST for its long filters; it changes nothing; at "+spec+":5:13)") {
		t.Errorf("--show-acknowledged: exit %d\n%s", code, out)
	}
	code, out, _ = lintRun(spec, "--format", "sarif")
	if code != ExitOK || strings.Count(out, `"suppressions"`) != 1 || !strings.Contains(out, `"kind": "inSource"`) {
		t.Errorf("sarif: exit %d; want the acknowledged finding listed once as suppressed in source\n%s", code, out)
	}
}

// TestLintAcknowledgedInTheConfig: with --config, the config file's acknowledgements apply too,
// and a reviewed spec is clean even with --fail-on warning; generate is quiet on it.
func TestLintAcknowledgedInTheConfig(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{"openapi.yaml": ackSpec, "idemgen.yaml": ackConfig(ackBadRequest)})
	cfg := filepath.Join(dir, "idemgen.yaml")
	code, out, errOut := lintRun("-c", cfg, "--fail-on", "warning")
	if code != ExitOK || out != "" || !strings.HasSuffix(errOut, ": no findings (2 acknowledged)\n") {
		t.Errorf("exit %d\nstdout %s\nstderr %s\nwant exit 0, no findings, 2 acknowledged", code, out, errOut)
	}
	code, out, _ = lintRun("-c", cfg, "--format", "json", "--show-acknowledged")
	if code != ExitOK || strings.Count(out, `"acknowledged": {`) != 2 || !strings.Contains(out, `"file": "`+cfg+`"`) {
		t.Errorf("json: exit %d\n%s", code, out)
	}
	code, _, errOut = runMain("", "generate", "-c", cfg)
	if code != ExitOK || errOut != "" {
		t.Errorf("generate: exit %d, stderr %q; want 0 and nothing on stderr", code, errOut)
	}
}

// TestLintAcknowledgementMistakes: in the config file, an unknown rule (with the nearest one) or
// a missing reason stops lint and generate with exit 2 at its line; an error cannot be
// acknowledged; an acknowledgement that accepts nothing is a stale warning at its line.
func TestLintAcknowledgementMistakes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, entries string
		code          int
		want          string
	}{
		{"unknown rule", "    - {rule: error-response-not-problme, operation: createPayment, reason: r}\n", ExitUsage,
			`idemgen.yaml:6:14: lint.acknowledge[0].rule: "error-response-not-problme" is not a rule of idemgen lint; did you mean error-response-not-problem?`},
		{"no reason", "    - {rule: error-response-not-problem, operation: createPayment}\n", ExitUsage,
			`idemgen.yaml:6:7: lint.acknowledge[0]: no reason: say why the warning is fine here`},
		{"blank reason", "    - {rule: error-response-not-problem, operation: createPayment, reason: \"  \"}\n", ExitUsage,
			`idemgen.yaml:6:7: lint.acknowledge[0]: no reason`},
		{"an error", "    - {rule: key-header-undeclared, operation: createPayment, reason: r}\n", ExitUsage,
			`idemgen.yaml:6:14: lint.acknowledge[0].rule: key-header-undeclared is an error, and errors cannot be acknowledged`},
		{"stale", ackBadRequest + "    - {rule: safe-method, operation: createPayment, reason: r}\n", ExitFindings,
			`idemgen.yaml:9:14: warning: POST /v1/payments: lint.acknowledge[1]: acknowledges safe-method, and the operation has no such warning (remove the acknowledgement) [acknowledgement-stale]`},
		{"no such operation", ackBadRequest + "    - {rule: safe-method, operation: getPayment, reason: r}\n", ExitFindings,
			`idemgen.yaml:9:14: warning: lint.acknowledge[1]: acknowledges safe-method on "getPayment", which names no operation of`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeFiles(t, map[string]string{"openapi.yaml": ackSpec, "idemgen.yaml": ackConfig(tc.entries)})
			cfg := filepath.Join(dir, "idemgen.yaml")
			code, out, errOut := lintRun("-c", cfg, "--fail-on", "warning")
			if got := strings.ReplaceAll(out+errOut, dir+string(filepath.Separator), ""); code != tc.code || !strings.Contains(got, tc.want) {
				t.Errorf("lint: exit %d, output\n%s\nwant exit %d and %q", code, got, tc.code, tc.want)
			}
			code, _, errOut = runMain("", "generate", "-c", cfg, "--check")
			if tc.code == ExitUsage {
				if got := strings.ReplaceAll(errOut, dir+string(filepath.Separator), ""); code != ExitUsage || !strings.Contains(got, tc.want) {
					t.Errorf("generate: exit %d, stderr\n%s\nwant exit 2 and %q", code, got, tc.want)
				}
			} else if !strings.Contains(errOut, "[acknowledgement-stale]") && !strings.Contains(errOut, "lint.acknowledge[1]") {
				t.Errorf("generate does not print the stale acknowledgement:\n%s", errOut)
			}
		})
	}
}
