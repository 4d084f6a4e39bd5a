package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tests below pin, message by message, what a user sees when the command line or an input
// file is wrong: the exit code and the whole of stderr. Messages say what is wrong, where (the
// file first, then line and column), and what to do; errors about the command line end with the
// help of the command that was run.

// message is one invocation and the exact outcome it must have.
type message struct {
	name   string
	args   []string
	code   int
	stderr string
	stdout string
}

func checkMessages(t *testing.T, cases []message) {
	t.Helper()
	for _, m := range cases {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", m.args...)
			if r.code != m.code {
				t.Errorf("idemgen %s: exit %d, want %d", strings.Join(m.args, " "), r.code, m.code)
			}
			if r.stderr != m.stderr {
				t.Errorf("idemgen %s: stderr\n%s\nwant\n%s", strings.Join(m.args, " "), r.stderr, m.stderr)
			}
			if r.stdout != m.stdout {
				t.Errorf("idemgen %s: stdout\n%s\nwant\n%s", strings.Join(m.args, " "), r.stdout, m.stdout)
			}
		})
	}
}

// TestMessageMissingFile: every command says a missing file the same way, file first.
func TestMessageMissingFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "openapi.yaml")
	cfg := filepath.Join(dir, "idemgen.yaml")
	checkMessages(t, []message{
		{"annotate", []string{"annotate", missing}, ExitUsage,
			"idemgen: " + missing + ": cannot read the spec: no such file or directory\n", ""},
		{"annotate -w", []string{"annotate", "-w", missing}, ExitUsage,
			"idemgen: " + missing + ": cannot read the spec: no such file or directory\n", ""},
		{"lint", []string{"lint", missing}, ExitUsage,
			"idemgen: " + missing + ": cannot read the spec: no such file or directory\n", ""},
		{"generate", []string{"generate", "-p", "api", "-o", dir, missing}, ExitUsage,
			"idemgen: " + missing + ": cannot read the spec: no such file or directory\n", ""},
		{"generate config", []string{"generate", "-c", cfg}, ExitUsage,
			"idemgen: " + cfg + ": cannot read the config: no such file or directory\n", ""},
	})
}

// TestMessageArgumentCount: a wrong number of arguments names the argument the command wants
// (or says it takes none), never "accepts 1 arg(s)" or "unknown command".
func TestMessageArgumentCount(t *testing.T) {
	t.Parallel()
	checkMessages(t, []message{
		{"annotate without SPEC", []string{"annotate"}, ExitUsage,
			"idemgen: annotate needs SPEC, the OpenAPI document to annotate (a file, or - for standard input)\n" +
				"Run 'idemgen annotate --help' for usage.\n", ""},
		{"annotate with two", []string{"annotate", "a.yaml", "b.yaml"}, ExitUsage,
			"idemgen: annotate takes one SPEC, got 2 (a.yaml, b.yaml): annotate one document at a time\n" +
				"Run 'idemgen annotate --help' for usage.\n", ""},
		{"lint without SPEC", []string{"lint"}, ExitUsage,
			"idemgen: lint needs SPEC, the OpenAPI document to check (or --config naming an idemgen.yaml with spec:)\nRun 'idemgen lint --help' for usage.\n", ""},
		{"lint with two", []string{"lint", "a.yaml", "b.yaml"}, ExitUsage,
			"idemgen: lint takes one SPEC, got 2 (a.yaml, b.yaml): lint one document at a time\nRun 'idemgen lint --help' for usage.\n", ""},
		{"generate with two", []string{"generate", "a.yaml", "b.yaml"}, ExitUsage,
			"idemgen: generate takes at most one SPEC, got 2 (a.yaml, b.yaml): generate one document per run, or name it in idemgen.yaml\n" +
				"Run 'idemgen generate --help' for usage.\n", ""},
		{"schema with an argument", []string{"schema", "extra-arg"}, ExitUsage,
			`idemgen: schema takes no arguments, got "extra-arg" (its settings are flags: --down, --schema, --table)` + "\n" +
				"Run 'idemgen schema --help' for usage.\n", ""},
		{"migrate with an argument", []string{"migrate", "app"}, ExitUsage,
			`idemgen: migrate takes no arguments, got "app" (its settings are flags: --database-url, --schema, --table)` + "\n" +
				"Run 'idemgen migrate --help' for usage.\n", ""},
		{"purge with arguments", []string{"purge", "now", "please"}, ExitUsage,
			`idemgen: purge takes no arguments, got "now please" (its settings are flags: --batch-size, --database-url, --dry-run, --schema, --table)` + "\n" +
				"Run 'idemgen purge --help' for usage.\n", ""},
		{"version with an argument", []string{"version", "x"}, ExitUsage,
			`idemgen: version takes no arguments, got "x"` + "\nRun 'idemgen version --help' for usage.\n", ""},
		{"unknown command", []string{"frobnicate"}, ExitUsage,
			`idemgen: unknown command "frobnicate" for "idemgen"` + "\nRun 'idemgen --help' for usage.\n", ""},
	})
}

// TestMessageFlags: flag problems name the flag as typed and what it wants, not a Go parse error,
// and point at the command's help.
func TestMessageFlags(t *testing.T) {
	t.Parallel()
	checkMessages(t, []message{
		{"misspelt flag", []string{"annotate", "--stroage", "marker", "openapi.yaml"}, ExitUsage,
			"idemgen: unknown flag --stroage; did you mean --storage?\nRun 'idemgen annotate --help' for usage.\n", ""},
		{"unknown flag", []string{"lint", "--bogus", "openapi.yaml"}, ExitUsage,
			"idemgen: unknown flag --bogus\nRun 'idemgen lint --help' for usage.\n", ""},
		{"not a number", []string{"purge", "--batch-size", "many"}, ExitUsage,
			`idemgen: --batch-size: "many" is not a whole number` + "\nRun 'idemgen purge --help' for usage.\n", ""},
		{"no value", []string{"annotate", "openapi.yaml", "--storage"}, ExitUsage,
			"idemgen: --storage needs a value\nRun 'idemgen annotate --help' for usage.\n", ""},
	})
}

// TestMessageConfigKeys: a misspelt idemgen.yaml key gets a suggestion, and a misspelt
// oapi-codegen option is named by its key path, line and column, not by a Go type.
func TestMessageConfigKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "idemgen.yaml")
	body := "version: 1\nspec: openapi.yaml\nouput: api\noapi-codegen:\n  output-options:\n    skip-prun: true\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	checkMessages(t, []message{
		{"ouput and skip-prun", []string{"generate", "-c", cfg}, ExitUsage,
			"idemgen: " + cfg + `:3:1: unknown key "ouput"; did you mean output?` + "\n" +
				cfg + `:6:5: unknown key "oapi-codegen.output-options.skip-prun"; did you mean skip-prune?` + "\n", ""},
	})
}

// TestMessageUnknownPolicyField: a misspelt x-idempotency field gets a suggestion.
func TestMessageUnknownPolicyField(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "openapi.yaml")
	doc := strings.Replace(checkSpec, "x-idempotency: true", "x-idempotency:\n        storrage: marker", 1)
	if err := os.WriteFile(spec, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	checkMessages(t, []message{
		{"storrage", []string{"lint", spec}, ExitFindings,
			spec + ": 1 error, 0 warnings\n",
			spec + ":10:9: error: POST /things: x-idempotency.storrage: unknown field; did you mean storage? [unknown-field]\n"},
	})
}

// TestMessageVersionFlag: --version and -v print what the version command prints.
func TestMessageVersionFlag(t *testing.T) {
	t.Parallel()
	want := runCLI(t, "", "version")
	if want.code != ExitOK || !strings.HasPrefix(want.stdout, "idemgen ") || want.stderr != "" {
		t.Fatalf("idemgen version: exit %d, stdout %q, stderr %q", want.code, want.stdout, want.stderr)
	}
	checkMessages(t, []message{
		{"--version", []string{"--version"}, ExitOK, "", want.stdout},
		{"-v", []string{"-v"}, ExitOK, "", want.stdout},
	})
}
