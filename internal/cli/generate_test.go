package cli

import (
	"bytes"
	"flag"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/internal/generator"
)

// update is the package's -update flag; other golden tests in package cli should use it too
// (defining the flag twice panics).
var update = flag.Bool("update", false, "rewrite the golden files of ../../testdata/<case>/")

// goldenRoot holds one folder per case. It is a Go module of its own (go.mod replaces
// github.com/idemgen/idemgen with ../), so the golden code is compiled against this checkout.
const goldenRoot = "../../testdata"

// TestGenerateGolden runs `idemgen generate` on every case folder of goldenRoot and compares
// exit code, stderr and the generated files with the committed ones.
//
// A case folder holds the input (openapi.yaml or .json, optionally idemgen.yaml and anything
// they refer to) and the expectation: the *.gen.go files, stderr.txt when something is printed,
// exit when the exit code is not 0. args, when present, is the command line (split on spaces);
// otherwise it is `generate` with an idemgen.yaml, else `generate --package api --output api
// openapi.yaml`. The command runs in a copy of the folder, so paths in messages are relative.
//
// Each successful case is then run again with --check, which must exit 0 with no output: a
// second generation is byte-identical. Finally the golden code is built, vetted and tested (a
// few cases keep *_test.go files next to their golden package).
//
// -update rewrites the expectations.
//
// Cases run one after the other: the command resolves relative paths against the working
// directory, which t.Chdir changes for the whole process.
func TestGenerateGolden(t *testing.T) {
	root, err := filepath.Abs(goldenRoot)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if !isGoldenCase(dir) {
			continue
		}
		ran++
		t.Run(e.Name(), func(t *testing.T) { runGoldenCase(t, dir) })
	}
	if ran == 0 {
		t.Fatalf("no case folders found in %s", goldenRoot)
	}
	if t.Failed() || *update {
		// -update only rewrites; the next plain run checks and compiles what it wrote.
		return
	}
	t.Run("compile", func(t *testing.T) {
		// The go command may rewrite go.mod and go.sum (-mod=mod, when the main module's
		// requirements move on); it works on copies so a test run never edits the checkout.
		modDir := t.TempDir()
		for _, f := range []string{"go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(modDir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		modfile := "-modfile=" + filepath.Join(modDir, "go.mod")
		// The golden code's own modules (the routers) are not this module's dependencies, so a
		// fresh machine's module cache lacks them: fetch them first, through the configured
		// proxy (a cache that has them already needs no network). The build, vet and tests
		// below then run with the network off.
		dl := exec.Command("go", "mod", "download", modfile)
		dl.Dir = root
		dl.Env = append(os.Environ(), "GOWORK=off")
		if out, err := dl.CombinedOutput(); err != nil {
			t.Fatalf("go mod download in %s (the golden code's modules): %v\n%s", goldenRoot, err, out)
		}
		// go test runs the behaviour tests kept next to some golden packages (payments/api:
		// the adapter over real HTTP on the PostgreSQL of TEST_DATABASE_URL).
		for _, args := range [][]string{{"build", modfile, "./..."}, {"vet", modfile, "./..."}, {"test", modfile, "-count=1", "./..."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			// Every module the golden code needs is in the module cache now.
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), goldenRoot, err, out)
			}
		}
	})
}

func isGoldenCase(dir string) bool {
	for _, name := range []string{"openapi.yaml", "openapi.json", "idemgen.yaml", "args"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

func runGoldenCase(t *testing.T, dir string) {
	work := t.TempDir()
	goldenCopyInputs(t, dir, work)
	args := goldenArgs(t, dir)
	t.Chdir(work)

	code, stdout, stderr := runMain("", args...)
	stderr = strings.ReplaceAll(stderr, work, "$WORK")
	got := goldenGenFiles(t, ".")

	if *update {
		goldenWrite(t, dir, code, stderr, got)
		return
	}
	wantCode := 0
	if b, err := os.ReadFile(filepath.Join(dir, "exit")); err == nil {
		wantCode, err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s/exit: %v", dir, err)
		}
	}
	if code != wantCode {
		t.Errorf("exit code %d, want %d\nstderr:\n%s", code, wantCode, stderr)
	}
	wantStderr, _ := os.ReadFile(filepath.Join(dir, "stderr.txt"))
	if d := cmp.Diff(string(wantStderr), stderr); d != "" {
		t.Errorf("stderr differs (-want +got):\n%s", d)
	}
	if stdout != "" {
		t.Errorf("generate printed to stdout:\n%s", stdout)
	}
	want := goldenGenFiles(t, dir)
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s was not generated", name)
		}
	}
	for name, b := range got {
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected file %s", name)
			continue
		}
		if !bytes.Equal(w, b) {
			t.Errorf("%s differs from the golden file (run go test ./internal/cli -run TestGenerateGolden -update):\n%s", name, cmp.Diff(string(w), string(b)))
		}
	}
	if code != 0 || t.Failed() {
		return
	}
	// A second, separate generation must give the same bytes.
	code, stdout, stderr = runMain("", append(args, "--check")...)
	if code != 0 || stdout != "" {
		t.Errorf("second run with --check: exit %d, want 0 with nothing printed\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func goldenArgs(t *testing.T, dir string) []string {
	if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
		return strings.Fields(string(b))
	}
	if _, err := os.Stat(filepath.Join(dir, "idemgen.yaml")); err == nil {
		return []string{"generate"}
	}
	specName := "openapi.yaml"
	if _, err := os.Stat(filepath.Join(dir, "openapi.json")); err == nil {
		specName = "openapi.json"
	}
	return []string{"generate", "--package", "api", "--output", "api", specName}
}

// copyInputs copies the case folder without its expectations.
func goldenCopyInputs(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if goldenIsExpectation(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func goldenIsExpectation(rel string) bool {
	return strings.HasSuffix(rel, ".gen.go") || strings.HasSuffix(rel, "_test.go") || rel == "stderr.txt" || rel == "exit"
}

// genFiles returns the *.gen.go files under dir by slash-separated relative path.
func goldenGenFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".gen.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func goldenWrite(t *testing.T, dir string, code int, stderr string, files map[string][]byte) {
	t.Helper()
	for name := range goldenGenFiles(t, dir) {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goldenWriteOrRemove(t, filepath.Join(dir, "stderr.txt"), stderr)
	exit := ""
	if code != 0 {
		exit = strconv.Itoa(code) + "\n"
	}
	goldenWriteOrRemove(t, filepath.Join(dir, "exit"), exit)
}

func goldenWriteOrRemove(t *testing.T, path, content string) {
	t.Helper()
	if content == "" {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runMain runs the CLI in-process.
const checkSpec = `openapi: 3.0.3
info:
  title: Check
  version: 1.0.0
paths:
  /things:
    post:
      operationId: createThing
      x-idempotency: true
      parameters:
        - name: Idempotency-Key
          in: header
          required: true
          schema:
            type: string
      responses:
        '201':
          description: created
`

// TestGenerateCheck: --check exits 0 on current files, 1 with a diff once the spec changes, and
// never writes.
func TestGenerateCheck(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("openapi.yaml", []byte(checkSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--package", "api", "--output", "api", "openapi.yaml"}

	code, stdout, stderr := runMain("", append(args, "--check")...)
	if code != ExitFindings || !strings.Contains(stdout, "--- /dev/null\n+++ api/api.gen.go") {
		t.Fatalf("--check before generating: exit %d, want 1 and a diff from /dev/null\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat("api"); !os.IsNotExist(err) {
		t.Fatalf("--check created the output directory (stat: %v)", err)
	}

	if code, _, stderr := runMain("", args...); code != ExitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	before := goldenGenFiles(t, "api")
	if len(before) != 2 {
		t.Fatalf("generated %d files, want api.gen.go and idempotency.gen.go", len(before))
	}
	if code, stdout, stderr := runMain("", append(args, "--check")...); code != ExitOK || stdout != "" || stderr != "" {
		t.Fatalf("--check on current files: exit %d, want 0 and no output\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	changed := strings.Replace(checkSpec, "x-idempotency: true", "x-idempotency:\n        ttl: 1h", 1)
	if err := os.WriteFile("openapi.yaml", []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runMain("", append(args, "--check")...)
	if code != ExitFindings {
		t.Fatalf("--check after the spec changed: exit %d, want 1\nstderr:\n%s", code, stderr)
	}
	for _, want := range []string{"--- api/idempotency.gen.go\n+++ api/idempotency.gen.go", "-\tTTL:            24 * time.Hour,", "+\tTTL:            time.Hour,"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("diff lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, "generated files in api are stale") {
		t.Errorf("stderr does not say the files are stale:\n%s", stderr)
	}
	// It names the commands that update them: go generate, and this command without --check.
	for _, want := range []string{"go generate ./...", "go tool idemgen generate -o api -p api openapi.yaml,"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr)
		}
	}
	if d := cmp.Diff(before, goldenGenFiles(t, "api")); d != "" {
		t.Errorf("--check changed files on disk:\n%s", d)
	}
}

// TestGenerateCheckSummarisesTheEmbeddedSpec: with the spec embedded (validate-request-body),
// --check after a spec change still fails, and its diff shows the embedded spec's dozens of base64
// lines as the one line of their count and hash, after the changes a reader can review. A change
// of the embedded spec alone fails too, with that one line.
func TestGenerateCheckSummarisesTheEmbeddedSpec(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("openapi.yaml", []byte(checkSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--validate-request-body", "--package", "api", "--output", "api", "openapi.yaml"}
	if code, _, stderr := runMain("", args...); code != ExitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	check := func(spec string) string {
		t.Helper()
		if err := os.WriteFile("openapi.yaml", []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runMain("", append(args, "--check")...)
		if code != ExitFindings {
			t.Fatalf("--check after the spec changed: exit %d, want 1\nstderr:\n%s", code, stderr)
		}
		return stdout
	}
	diff := check(strings.Replace(checkSpec, "x-idempotency: true", "x-idempotency:\n        ttl: 1h", 1))
	embedded := regexp.MustCompile(`(?m)^[-+]\t// the embedded spec: \d+ lines of base64, sha256 [0-9a-f]{16} \(its lines are left out of this diff\)$`)
	if n := len(embedded.FindAllString(diff, -1)); n != 2 || !strings.Contains(diff, "+\tTTL:            time.Hour,") {
		t.Errorf("diff: %d summary lines of the embedded spec, want one removed and one added, and the TTL change:\n%s", n, diff)
	}
	if loc := embedded.FindStringIndex(diff); loc == nil || strings.Index(diff, "+\tTTL:") > loc[0] {
		t.Errorf("the file whose only change is its embedded spec comes before the TTL change:\n%s", diff)
	}
	for _, l := range strings.Split(diff, "\n") {
		if len(l) > 70 && strings.Trim(l[1:], "\t\",ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == "" {
			t.Errorf("the diff shows a base64 line of the embedded spec: %q", l)
			break
		}
	}
	// Regenerated as the first change says, then only a description changes: only the
	// embedded spec differs, and --check still fails on it, with the one line.
	ttl := strings.Replace(checkSpec, "x-idempotency: true", "x-idempotency:\n        ttl: 1h", 1)
	if err := os.WriteFile("openapi.yaml", []byte(ttl), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain("", args...); code != ExitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	diff = check(strings.Replace(ttl, "description: created", "description: the payment, created", 1))
	if n := len(embedded.FindAllString(diff, -1)); n != 2 {
		t.Errorf("diff of a spec whose embedded copy alone changed: %d summary lines, want 2:\n%s", n, diff)
	}
}

// TestGenerateConfigFromWorkingDirectory: with no spec and no -c, ./idemgen.yaml is read, its
// paths are relative to it, and flags override it.
func TestGenerateConfigFromWorkingDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("spec", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("spec/openapi.yaml", []byte(checkSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "version: 1\nspec: spec/openapi.yaml\npackage: things\noutput: gen/things\n"
	if err := os.WriteFile("idemgen.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain("", "generate"); code != ExitOK {
		t.Fatalf("generate: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile("gen/things/idempotency.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "// Code generated by idemgen. DO NOT EDIT.\n\npackage things\n") {
		t.Errorf("idempotency.gen.go starts with %q", firstLines(string(b), 3))
	}

	if code, _, stderr := runMain("", "generate", "-p", "other", "-o", "out"); code != ExitOK {
		t.Fatalf("generate with flags: exit %d\n%s", code, stderr)
	}
	b, err = os.ReadFile("out/api.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "\npackage other\n") {
		t.Errorf("--package did not override the config file:\n%s", firstLines(string(b), 8))
	}
}

// TestGenerateUsageErrors: problems with the invocation exit 2 and say what to do.
func TestGenerateUsageErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("openapi.yaml", []byte(checkSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no spec, no config", []string{"generate"}, "no spec given and no idemgen.yaml here"},
		{"missing config file", []string{"generate", "-c", "nope.yaml"}, "nope.yaml: cannot read the config: no such file or directory"},
		{"two specs", []string{"generate", "a.yaml", "b.yaml"}, "generate takes at most one SPEC, got 2"},
		{"bad package", []string{"generate", "-p", "my-api", "-o", "api", "openapi.yaml"}, `package name "my-api" is not a Go identifier`},
		{"unknown router", []string{"generate", "--router", "martini", "openapi.yaml"}, `--router: unknown router "martini" (supported: std-http, chi, gorilla, echo, echo5, gin, fiber, fiber-v3, iris)`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runMain("", tt.args...)
		if code != ExitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", tt.name, code, stderr, tt.want)
		}
		if stdout != "" {
			t.Errorf("%s: printed to stdout: %q", tt.name, stdout)
		}
	}
	if _, err := os.Stat("api"); !os.IsNotExist(err) {
		t.Errorf("a failed invocation wrote files (stat api: %v)", err)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// TestGenerateRemoteRefs: a $ref to another host is refused with a message that names the flag,
// and the flag (or allow-remote-refs in idemgen.yaml) lets idemgen follow it.
func TestGenerateRemoteRefs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "IdempotencyKey: {name: Idempotency-Key, in: header, schema: {type: string}}\n")
	}))
	defer srv.Close()
	dir := t.TempDir()
	specPath := filepath.Join(dir, "openapi.yaml")
	spec := strings.Replace(checkSpec, `        - name: Idempotency-Key
          in: header
          required: true
          schema:
            type: string
`, `        - $ref: "`+srv.URL+`/common.yaml#/IdempotencyKey"
`, 1)
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "api")

	code, _, stderr := runMain("", "generate", "-p", "api", "-o", out, specPath)
	if code != ExitUsage || !strings.Contains(stderr, "remote $ref") || !strings.Contains(stderr, "--allow-remote-refs") {
		t.Fatalf("without the flag: exit %d, stderr %q; want exit 2 naming --allow-remote-refs", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused spec must write nothing, but %s exists", out)
	}

	// With the flag idemgen follows the $ref (the policy resolves the remote key header); oapi-codegen
	// then needs an import mapping for the other document, and the message says so.
	code, _, stderr = runMain("", "generate", "-p", "api", "-o", out, "--allow-remote-refs", specPath)
	if code != ExitUsage || strings.Contains(stderr, "remote $ref") ||
		!strings.Contains(stderr, "oapi-codegen cannot generate code") || !strings.Contains(stderr, "import-mapping") {
		t.Fatalf("with --allow-remote-refs: exit %d, stderr %q; want oapi-codegen's import-mapping message", code, stderr)
	}
}

// TestEveryRouterHasAGoldenCase: each router idemgen generates for has its golden case, whose
// test runs the shared HTTP table (testdata/internal/routertest), so a router added to
// generator.Routers cannot ship untested.
func TestEveryRouterHasAGoldenCase(t *testing.T) {
	for _, r := range generator.Routers {
		test := filepath.Join(goldenRoot, "router-"+r, "api", "router_test.go")
		b, err := os.ReadFile(test)
		if err != nil {
			t.Errorf("router %s has no golden case running the HTTP table: %v", r, err)
			continue
		}
		if !strings.Contains(string(b), "routertest.Run(") || !strings.Contains(string(b), `Name: `) {
			t.Errorf("%s does not run routertest.Run", test)
		}
	}
}

// TestGenerateFlagsAreOptions: every flag generator.Options reads (its flag tags) is a flag of
// generate, so a setting added to Options without its flag line fails here rather than being
// silently unsettable from the command line; and generate --help lists every config key.
func TestGenerateFlagsAreOptions(t *testing.T) {
	cmd := newGenerateCmd(&streams{})
	for _, name := range generator.OptionFlags() {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("generator.Options reads --%s, which generate does not declare", name)
		}
	}
	for _, key := range generator.ConfigKeys() {
		if !strings.Contains(cmd.Long, "\n  "+key+":") {
			t.Errorf("generate --help does not list idemgen.yaml's key %s", key)
		}
	}
}
