package generator

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

func load(t *testing.T, path string) Input {
	t.Helper()
	s, err := spec.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.HasErrors() {
		t.Fatalf("%s has errors: %v", path, s.Diagnostics)
	}
	return Input{File: s.File, Raw: s.Raw, Model: s.Model}
}

// TestGenerateIsReentrant: oapi-codegen keeps package-level state; concurrent generations of
// different documents must neither race nor mix their output.
func TestGenerateIsReentrant(t *testing.T) {
	t.Parallel()
	inputs := []Input{
		load(t, "../../testdata/payments/openapi.yaml"),
		load(t, "../../testdata/path-key-scope/openapi.yaml"),
		load(t, "../../testdata/openapi-31/openapi.yaml"),
	}
	want := make([]Files, len(inputs))
	for i, in := range inputs {
		f, err := Generate(in, Options{Package: "api"})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = f
	}
	var wg sync.WaitGroup
	for round := range 4 {
		for i, in := range inputs {
			wg.Go(func() {
				got, err := Generate(in, Options{Package: "api"})
				if err != nil {
					t.Error(err)
					return
				}
				for name, b := range got {
					if !bytes.Equal(b, want[i][name]) {
						t.Errorf("round %d, %s: %s differs from the sequential run", round, in.File, name)
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestGenerateLeavesTheLoadedDocumentAlone: the model's spec keeps its raw operationIds and
// required key headers; generation works on its own fresh copy.
func TestGenerateLeavesTheLoadedDocumentAlone(t *testing.T) {
	t.Parallel()
	s, err := spec.Load("../../testdata/ref-key-header/openapi.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(Input{File: s.File, Raw: s.Raw, Model: s.Model}, Options{Package: "api"}); err != nil {
		t.Fatal(err)
	}
	op := s.Doc.Paths.Value("/transfers").Post
	if op.OperationID != "createTransfer" {
		t.Errorf("operationId rewritten to %q", op.OperationID)
	}
	if !op.Parameters[0].Value.Required {
		t.Errorf("the key header parameter of the loaded document was made optional")
	}
	if p := s.Doc.Components.Parameters["IdempotencyKey"]; !p.Value.Required {
		t.Errorf("the shared component parameter was made optional")
	}
}

func TestGenerateHeaderAndFileNames(t *testing.T) {
	t.Parallel()
	files, err := Generate(load(t, "../../testdata/payments/openapi.yaml"), Options{Package: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{OapiFile, IdempotencyFile}, files.Names()); d != "" {
		t.Errorf("file names (-want +got):\n%s", d)
	}
	for name, b := range files {
		first, _, _ := strings.Cut(string(b), "\n")
		if first != Header {
			t.Errorf("%s starts with %q, want %q", name, first, Header)
		}
		if strings.Count(string(b), "DO NOT EDIT") != 1 {
			t.Errorf("%s carries more than one DO NOT EDIT line (oapi-codegen's own header kept?)", name)
		}
		if !strings.Contains(string(b), "\npackage payments\n") {
			t.Errorf("%s is not in package payments", name)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	t.Parallel()
	in := load(t, "../../testdata/payments/openapi.yaml")
	if _, err := Generate(in, Options{Package: "my-api"}); err == nil || !strings.Contains(err.Error(), `package name "my-api" is not a Go identifier`) {
		t.Errorf("bad package: %v", err)
	}
	if _, err := Generate(in, Options{Package: "type"}); err == nil || !strings.Contains(err.Error(), `package name "type" is a Go keyword`) {
		t.Errorf("keyword package: err = %v", err)
	}
	if _, err := LookupRouter("martini"); err == nil ||
		!strings.Contains(err.Error(), `unknown router "martini" (supported: std-http, chi, gorilla, echo, echo5, gin, fiber, fiber-v3, iris)`) {
		t.Errorf("unknown router: %v", err)
	}
	for _, r := range routerTable {
		if _, err := Generate(in, Options{Package: "api", Router: r}); err != nil {
			t.Errorf("router %s: %v", r, err)
		}
	}
}

func TestRecoverPanic(t *testing.T) {
	t.Parallel()
	err := recoverPanic(func() error {
		var m map[string]int
		m["x"] = 1 // a nil-map write, as a bug inside oapi-codegen would panic
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "oapi-codegen panicked: assignment to entry in nil map") {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "generator_test.go") {
		t.Errorf("the message does not point at the panicking frame:\n%v", err)
	}
	// The message names the spec once wrapped for the user.
	if msg := oapiError("openapi.yaml", err).Error(); !strings.HasPrefix(msg, "openapi.yaml: oapi-codegen cannot generate code for this document: oapi-codegen panicked") {
		t.Errorf("wrapped: %s", msg)
	}
}

func TestDurationLiteral(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                        "0",
		time.Hour:                "time.Hour",
		72 * time.Hour:           "72 * time.Hour",
		90 * time.Second:         "90 * time.Second",
		1500 * time.Millisecond:  "1500 * time.Millisecond",
		time.Minute:              "time.Minute",
		1500 * time.Microsecond:  "time.Duration(1500000)",
		24*time.Hour + time.Hour: "25 * time.Hour",
	} {
		if got := durationLiteral(d); got != want {
			t.Errorf("durationLiteral(%v) = %q, want %q", d, got, want)
		}
	}
}

// mapFS is an in-memory FS.
type mapFS map[string][]byte

func (m mapFS) ReadFile(name string) ([]byte, error) {
	b, ok := m[name]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return b, nil
}

func (m mapFS) WriteFile(name string, data []byte) error {
	m[name] = data
	return nil
}

func TestWriteAndCheck(t *testing.T) {
	t.Parallel()
	files := Files{"a.gen.go": []byte("package a\n"), "b.gen.go": []byte("package a\n\nvar B = 1\n")}
	dst := mapFS{"b.gen.go": []byte("package a\n\nvar B = 2\n"), "keep.go": []byte("mine")}

	var diff bytes.Buffer
	stale, err := Check(dst, "out", files, &diff)
	if err != nil || !stale {
		t.Fatalf("Check = %v, %v; want stale", stale, err)
	}
	want := `--- /dev/null
+++ out/a.gen.go
@@ -0,0 +1 @@
+package a
--- out/b.gen.go
+++ out/b.gen.go
@@ -1,3 +1,3 @@
 package a
 
-var B = 2
+var B = 1
`
	if d := cmp.Diff(want, diff.String()); d != "" {
		t.Errorf("diff (-want +got):\n%s", d)
	}
	if string(dst["b.gen.go"]) != "package a\n\nvar B = 2\n" {
		t.Errorf("Check wrote to the FS")
	}

	wrote, err := Write(dst, files)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"a.gen.go", "b.gen.go"}, wrote); d != "" {
		t.Errorf("wrote (-want +got):\n%s", d)
	}
	if string(dst["keep.go"]) != "mine" {
		t.Errorf("Write touched a file that is not ours")
	}
	if wrote, _ := Write(dst, files); len(wrote) != 0 {
		t.Errorf("second Write rewrote %v; unchanged files must be left alone", wrote)
	}
	diff.Reset()
	if stale, err := Check(dst, "out", files, &diff); err != nil || stale || diff.Len() != 0 {
		t.Errorf("Check after Write = %v, %v, %q; want current", stale, err, diff.String())
	}
}

func TestDirFS(t *testing.T) {
	t.Parallel()
	dir := DirFS(filepath.Join(t.TempDir(), "new", "api"))
	if _, err := dir.ReadFile("x.gen.go"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := dir.WriteFile("x.gen.go", []byte("package api\n")); err != nil {
		t.Fatal(err)
	}
	b, err := dir.ReadFile("x.gen.go")
	if err != nil || string(b) != "package api\n" {
		t.Errorf("read back %q, %v", b, err)
	}
	entries, _ := os.ReadDir(string(dir))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want just x.gen.go (no temporary file left)", len(entries))
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(filepath.Join("conf", "idemgen.yaml"), []byte(`version: 1
spec: ../openapi.yaml
package: api
output: gen
router: std-http
allow-remote-refs: true
oapi-codegen:
  output-options:
    name-normalizer: ToCamelCaseWithInitialisms
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec != "openapi.yaml" || c.Output != filepath.Join("conf", "gen") || c.Package != "api" || !c.AllowRemoteRefs {
		t.Errorf("paths must be relative to the config file: %+v", c)
	}
	if c.OapiCodegen == nil || c.OapiCodegen.OutputOptions.NameNormalizer != "ToCamelCaseWithInitialisms" || !c.OapiCodegen.OutputOptions.SkipPrune {
		t.Errorf("passthrough: %+v (pruning must stay off unless asked)", c.OapiCodegen)
	}
	if c.Override != nil {
		t.Errorf("no override key, yet Override is %+v", c.Override)
	}
	c, err = ParseConfig("idemgen.yaml", []byte("version: 1\noverride:\n  claim: transaction\n  wait: 2s\n"))
	if err != nil || c.Override == nil || !c.Override.Claim.Set || c.Override.Claim.V != policy.ClaimTransaction ||
		c.Override.Wait.V != 2*time.Second || c.Override.Storage.Set {
		t.Errorf("override {claim: transaction, wait: 2s}: %+v, %v", c.Override, err)
	}
	c, err = ParseConfig("idemgen.yaml", []byte("version: 1\noapi-codegen:\n  output-options:\n    skip-prune: false\n"))
	if err != nil || c.OapiCodegen.OutputOptions.SkipPrune {
		t.Errorf("skip-prune: false must turn pruning on: %+v, %v", c, err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"no version", "spec: a.yaml\n", "idemgen.yaml:1:1: missing \"version: 1\""},
		{"version 2", "version: 2\n", "idemgen.yaml:1:10: version 2 is not supported (this idemgen reads version 1)"},
		{"unknown key", "version: 1\nsource: a.yaml\n", `idemgen.yaml:2:1: unknown key "source" (known keys: version, spec, package, output, router, allow-remote-refs, client, validate-request-body, oapi-codegen, lint, override)`},
		{"misspelt key", "version: 1\nouput: api\n", `idemgen.yaml:2:1: unknown key "ouput"; did you mean output?`},
		{"camelCase", "version: 1\nallowRemoteRefs: true\n", `idemgen.yaml:2:1: unknown key "allowRemoteRefs"`},
		{"wrong type", "version: 1\npackage: [a]\n", "idemgen.yaml:2:10: package: expected a string, got a list"},
		{"version not a number", "version: one\n", `idemgen.yaml:1:10: version: expected the number 1, got "one"`},
		{"bool", "version: 1\nallow-remote-refs: maybe\n", `idemgen.yaml:2:20: allow-remote-refs: expected true or false, got "maybe"`},
		{"validation not a bool", "version: 1\nvalidate-request-body: request\n", `idemgen.yaml:2:24: validate-request-body: expected true or false, got "request"`},
		{"validation a list", "version: 1\nvalidate-request-body: [body]\n", `idemgen.yaml:2:24: validate-request-body: expected true or false, got a list`},
		{"validation misspelt", "version: 1\nvalidate-request-bodies: true\n", `idemgen.yaml:2:1: unknown key "validate-request-bodies"; did you mean validate-request-body?`},
		{"unknown router", "version: 1\nrouter: echo4\n", `idemgen.yaml:2:9: router: unknown router "echo4" (supported: std-http, chi, gorilla, echo, echo5, gin, fiber, fiber-v3, iris)`},
		{"twice", "version: 1\nspec: a\nspec: b\n", `idemgen.yaml:3:1: "spec" is set twice`},
		{"not a mapping", "- a\n", "idemgen.yaml:1:1: the config must be a mapping"},
		{"empty", "", "idemgen.yaml: empty config file"},
		{"oapi generate", "version: 1\noapi-codegen:\n  generate:\n    client: true\n", `idemgen.yaml:3:3: oapi-codegen: "generate" cannot be set here`},
		{"oapi unknown option", "version: 1\noapi-codegen:\n  output-options:\n    skip-prun: true\n", `idemgen.yaml:4:5: unknown key "oapi-codegen.output-options.skip-prun"; did you mean skip-prune?`},
		{"oapi option type", "version: 1\noapi-codegen:\n  output-options:\n    skip-prune: yes please\n", `idemgen.yaml:4:17: oapi-codegen.output-options.skip-prune: expected true or false, got "yes please"`},
		{"override not a mapping", "version: 1\noverride: transaction\n", `idemgen.yaml:2:11: override: expected a mapping of x-idempotency fields such as {claim: transaction}, got "transaction"`},
		{"override bad claim", "version: 1\noverride:\n  claim: sometimes\n", `idemgen.yaml:3:10: override.claim: `},
		{"override unknown field", "version: 1\noverride:\n  claims: transaction\n", `idemgen.yaml:3:3: override.claims: `},
		{"oapi misspelt section", "version: 1\noapi-codegen:\n  output-option: {}\n", `idemgen.yaml:3:3: unknown key "oapi-codegen.output-option"; did you mean output-options?`},
	}
	for _, tt := range tests {
		_, err := ParseConfig("idemgen.yaml", []byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	// All problems at once.
	_, err := ParseConfig("idemgen.yaml", []byte("version: 1\nfoo: 1\nbar: 2\n"))
	if err == nil || strings.Count(err.Error(), "unknown key") != 2 {
		t.Errorf("want both unknown keys reported, got %v", err)
	}
}

// TestConfigSchema: the shipped JSON Schema accepts every config file in the repository that
// ParseConfig accepts, and rejects what ParseConfig rejects.
func TestConfigSchema(t *testing.T) {
	t.Parallel()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ConfigSchema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("config.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	validate := func(name string, data []byte) error {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Through JSON, so numbers and maps have the types the validator expects.
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
		if err != nil {
			t.Fatal(err)
		}
		return schema.Validate(inst)
	}

	var files []string
	for _, pattern := range []string{"../../testdata/*/idemgen.yaml", "../../examples/*/idemgen.yaml", "../../bench/internal/*/idemgen.yaml"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	valid := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, perr := ParseConfig(f, data)
		serr := validate(f, data)
		if (perr == nil) != (serr == nil) {
			t.Errorf("%s: ParseConfig says %v, the schema says %v", f, perr, serr)
		}
		if perr == nil {
			valid++
		}
	}
	if valid < 2 {
		t.Errorf("only %d valid config files found in %v; the test checks nothing", valid, files)
	}
	for _, bad := range []string{"version: 2\n", "version: 1\npakage: api\n", "version: 1\nrouter: martini\n", "version: 1\nvalidate-request-body: \"yes\"\n", "spec: a.yaml\n", "version: 1\noverride: {claim: sometimes}\n", "version: 1\noverride: {claims: lease}\n"} {
		if err := validate("inline", []byte(bad)); err == nil {
			t.Errorf("the schema accepts %q", bad)
		}
	}
}

// TestLoadFreshRefusesRemoteRefs: the copy oapi-codegen renders follows a remote $ref only when
// allowed, whatever the spec loader did.
func TestLoadFreshRefusesRemoteRefs(t *testing.T) {
	t.Parallel()
	raw := []byte(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /x:
    get:
      responses:
        '200':
          description: ok
          content:
            application/json:
              schema:
                $ref: 'http://127.0.0.1:9/schemas.yaml#/X'
`)
	_, err := loadFresh("openapi.yaml", raw, false)
	if err == nil || !strings.Contains(err.Error(), `remote $ref "http://127.0.0.1:9/schemas.yaml" refused: copy the referenced document`) {
		t.Errorf("got %v", err)
	}
	// Allowed, the loader tries the host (nothing listens on port 9): a connection error, not a refusal.
	if _, err := loadFresh("openapi.yaml", raw, true); err == nil || strings.Contains(err.Error(), "refused:") {
		t.Errorf("allowed remote ref: got %v", err)
	}
}
