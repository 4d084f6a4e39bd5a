package annotate

import (
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/internal/generator"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// checkLint loads the annotated document with internal/spec, the parser behind idemgen lint and
// idemgen generate: it must report no errors (warnings, such as a POST left alone, are fine).
func checkLint(t *testing.T, file string, out []byte) *spec.Spec {
	t.Helper()
	return checkLintBut(t, file, out, nil)
}

// checkLintBut is checkLint, except for the key-pattern-invalid errors of the operations annotate
// reported with a key pattern that is not RE2 (res.KeyPatterns): those stay until the user writes
// the line the report gives.
func checkLintBut(t *testing.T, file string, out []byte, res *Result) *spec.Spec {
	t.Helper()
	s, err := spec.LoadData(file, out, nil)
	if err != nil {
		t.Fatalf("spec.LoadData on the result: %v", err)
	}
	reported := func(d spec.Diagnostic) bool {
		if res == nil || d.Rule != policy.RuleKeyPatternInvalid {
			return false
		}
		return slices.ContainsFunc(res.KeyPatterns, func(k KeyPattern) bool { return slices.Contains(k.Routes, d.Operation) })
	}
	for _, d := range s.Diagnostics {
		if d.Severity == policy.SeverityError && !reported(d) {
			t.Errorf("lint error in the result: %s", d)
		}
	}
	return s
}

// compiles lists the corpus documents whose oapi-codegen output compiles without idemgen (see the
// corpus README): annotating them must not break that.
var compiles = []struct {
	pkg, file string
	// resolve generates with oapi-codegen's resolve-type-name-collisions, the option idemgen's
	// collision hint suggests: the names annotate adds must build with it too.
	resolve bool
}{
	{"petstore", "corpus/oai-examples/petstore.yaml", false},
	{"petstoreexpanded", "corpus/oai-examples/petstore-expanded.yaml", false},
	{"uspto", "corpus/oai-examples/uspto.yaml", false},
	{"link", "corpus/oai-examples/link-example.yaml", false},
	{"callback", "corpus/oai-examples/callback-example.yaml", false},
	{"webhook", "corpus/oai-examples/webhook-example-3.1.json", false},
	{"adyen", "corpus/adyen/CheckoutService-v71.json", false},
	{"resend", "corpus/resend/resend.yaml", false},
	{"twilio", "corpus/twilio/twilio_messaging_v1.yaml", false},
	{"oneoperation", "specs/one-operation.yaml", true},
	{"namestaken", "specs/names-taken.yaml", true},
}

// TestAnnotatedCorpusCompiles annotates each document of compiles, generates the idempotent
// server from the result with idemgen's generator, and builds all of it in a scratch module that
// points at this checkout. The module lives outside the repository, so a half-written package
// never shows up in anyone's go build ./... while the test runs.
func TestAnnotatedCorpusCompiles(t *testing.T) {
	t.Parallel()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	gomod := "module idemgen.test/annotated\n\ngo 1.26.0\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => " + repo + "\n"
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	var sum []byte
	for _, f := range []string{"go.sum", "testdata/go.sum"} {
		b, err := os.ReadFile(filepath.Join(repo, f))
		if err == nil {
			sum = append(sum, b...)
		}
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	for _, c := range compiles {
		in, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Annotate(c.file, in, Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		s := checkLint(t, c.file, res.Output)
		opts := generator.Options{Package: c.pkg}
		if c.resolve {
			opts.OapiCodegen = &codegen.Configuration{}
			opts.OapiCodegen.OutputOptions.ResolveTypeNameCollisions = true
		}
		files, err := generator.Generate(generator.Input{File: c.file, Raw: res.Output, Model: s.Model}, opts)
		if err != nil {
			t.Errorf("%s: generate from the annotated document: %v", c.file, err)
			continue
		}
		dir := filepath.Join(mod, c.pkg)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, src := range files {
			if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("annotate + generate: %v", time.Since(start).Round(time.Millisecond))
	if t.Failed() {
		return
	}
	start = time.Now()
	// -trimpath leaves the module's directory, a new temporary one each run, out of the build
	// cache's keys: a run whose generated code is unchanged finds every package compiled by the
	// previous run instead of compiling them all again (the build takes minutes on two cores).
	cmd := exec.Command("go", "build", "-trimpath", "./...")
	cmd.Dir = mod
	// Every module the generated code needs is a dependency of this module, so it is in the
	// module cache: the network is never needed.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of the code generated from the annotated corpus: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	t.Logf("go build: %v", time.Since(start).Round(time.Millisecond))
}
