package annotate

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// optionSets are combinations the golden cases do not all cover; the invariants must hold for
// every one of them on every small document.
var optionSets = []Options{
	{},
	{Methods: []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}},
	{Methods: []string{"put", "delete"}, NoProblems: true},
	{NoReplayedHeader: true, TTL: "1h", Lease: "10s", Wait: "5s"},
	{Scope: []string{"operation"}, Claim: "transaction", MismatchStatus: 400},
	{Storage: "marker", NoProblems: true, NoReplayedHeader: true},
}

func smallDocuments(t *testing.T) []string {
	t.Helper()
	specs, err := filepath.Glob("testdata/specs/*")
	if err != nil {
		t.Fatal(err)
	}
	oai, err := filepath.Glob("testdata/corpus/oai-examples/*.*")
	if err != nil {
		t.Fatal(err)
	}
	return append(specs, oai...)
}

// TestInvariants checks, for every small document and every option set: only insertions (inline
// constructs aside), comments kept, a byte-identical second run, and a result without lint errors.
func TestInvariants(t *testing.T) {
	t.Parallel()
	for _, file := range smallDocuments(t) {
		in, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rewrites := strings.Contains(file, "flow") || strings.Contains(file, "minified") || strings.Contains(file, "tabs")
		for i, opts := range optionSets {
			res, err := Annotate(file, in, opts)
			if err != nil {
				t.Errorf("%s, options %d: %v", file, i, err)
				continue
			}
			checkOnlyAdds(t, in, res.Output, rewrites)
			checkCommentsSurvive(t, in, res.Output)
			again, err := Annotate(file, res.Output, opts)
			if err != nil {
				t.Errorf("%s, options %d, second run: %v", file, i, err)
				continue
			}
			if !bytes.Equal(again.Output, res.Output) {
				d, _ := UnifiedDiff(file, res.Output, again.Output)
				t.Errorf("%s, options %d: second run changed the document:\n%s", file, i, d)
			}
			checkLintBut(t, file, res.Output, res)
		}
	}
}

// FuzzAnnotate feeds mangled documents to Annotate, under each option set: it must never panic,
// and whatever it accepts must come out parsing, with no lint error the input did not already
// have, with nothing of the input changed or removed (only bytes inserted) and its comments
// kept, and unchanged by a second run. The seeds are the small documents of TestInvariants (the trap specs and the
// OpenAPI examples); larger corpus documents make each exec too slow to explore much.
func FuzzAnnotate(f *testing.F) {
	files, _ := filepath.Glob("testdata/specs/*")
	oai, _ := filepath.Glob("testdata/corpus/oai-examples/*.*")
	for _, d := range append(files, oai...) {
		b, err := os.ReadFile(d)
		if err != nil {
			f.Fatal(err)
		}
		for i := range optionSets {
			f.Add(b, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, set uint8) {
		opts := optionSets[int(set)%len(optionSets)]
		res, err := Annotate("fuzz.yaml", in, opts)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				// Only the input may be refused: an option set that worked on the seeds, or a
				// result that does not read back, is the annotator's fault.
				t.Fatalf("not an input error: %v", err)
			}
			return
		}
		if !res.Changed() {
			if !bytes.Equal(res.Output, in) {
				t.Fatal("output differs although nothing was annotated")
			}
			return
		}
		checkOnlyInsertions(t, in, res.Output)
		checkCommentsSurvive(t, in, res.Output)
		again, err := Annotate("fuzz.yaml", res.Output, opts)
		if err != nil {
			t.Fatalf("second run: %v", err)
		}
		if !bytes.Equal(again.Output, res.Output) {
			d, _ := UnifiedDiff("fuzz.yaml", res.Output, again.Output)
			t.Fatalf("second run changed the output:\n%s", d)
		}
		checkNoNewLintErrors(t, in, res.Output, res)
	})
}

// checkOnlyInsertions asserts that out is in with bytes inserted and nothing else: every byte of
// in appears in out, in order. This is exact where TestInvariants' line comparison has to excuse
// inline constructs: an insertion into a line of closing braces ("}}}}}") splits that line,
// although no byte of it changed (testdata/fuzz/FuzzAnnotate/4257227f4ffe45d1).
func checkOnlyInsertions(t *testing.T, in, out []byte) {
	t.Helper()
	j := 0
	for i := 0; i < len(out) && j < len(in); i++ {
		if out[i] == in[j] {
			j++
		}
	}
	if j < len(in) {
		line := bytes.Count(in[:j], []byte("\n")) + 1
		t.Errorf("the input's byte %d (line %d, %q) is not in the output: annotate changed or removed text", j, line, in[j:min(j+20, len(in))])
	}
}

// checkNoNewLintErrors loads both documents with internal/spec: the output must load, and each
// of its errors must be one the input already had (same rule, same operation). Fuzzed input can
// carry a broken x-idempotency of its own, which annotate leaves alone and cannot be blamed for.
func checkNoNewLintErrors(t *testing.T, in, out []byte, res *Result) {
	t.Helper()
	dir := t.TempDir() // relative $refs in fuzzed input find nothing to read
	after, err := spec.LoadData(filepath.Join(dir, "fuzz.yaml"), out, nil)
	if err != nil {
		t.Fatalf("the annotated document does not load: %v", err)
	}
	had := map[string]bool{}
	if before, err := spec.LoadData(filepath.Join(dir, "fuzz.yaml"), in, nil); err == nil {
		for _, d := range before.Errors() {
			had[d.Rule+" "+d.Operation] = true
		}
	}
	for _, d := range after.Errors() {
		// A key pattern that is not RE2 is reported by annotate, the error left for the user.
		reported := d.Rule == policy.RuleKeyPatternInvalid &&
			slices.ContainsFunc(res.KeyPatterns, func(k KeyPattern) bool { return slices.Contains(k.Routes, d.Operation) })
		if !had[d.Rule+" "+d.Operation] && !reported {
			t.Errorf("lint error the annotation introduced: %s", d)
		}
	}
}

// TestCorpusResolves annotates every document of the corpus, the real public specs, taking every
// state-changing method, and loads each result through internal/spec, whose x-idempotency rules
// are package policy's: no operation annotate marked may have an error. lob is the one document
// kin-openapi cannot load (a non-standard $ref under content); annotate must refuse it as input
// rather than write anything.
func TestCorpusResolves(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/corpus/*/*.*")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, f := range files {
		if ext := filepath.Ext(f); ext == ".yaml" || ext == ".yml" || ext == ".json" {
			docs = append(docs, f)
		}
	}
	if len(docs) < 13 {
		t.Fatalf("found %d corpus documents, want the 13 of testdata/corpus/PROVENANCE.md", len(docs))
	}
	opts := Options{Methods: []string{"put", "post", "delete", "patch"}}
	for _, file := range docs {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Annotate(file, in, opts)
			if strings.Contains(file, "/lob/") {
				if ie := (*InputError)(nil); !errors.As(err, &ie) {
					t.Errorf("err = %v, want an InputError (kin-openapi cannot load it)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := spec.LoadData(file, res.Output, nil)
			if err != nil {
				t.Fatalf("the result does not load: %v", err)
			}
			annotated := map[string]bool{}
			for _, r := range res.Annotated {
				annotated[r] = true
			}
			resolved := 0
			for _, op := range s.Model.Operations {
				if annotated[op.Route()] && op.Policy != nil {
					resolved++
				}
			}
			if resolved != len(res.Annotated) {
				t.Errorf("%d operations annotated, %d carry a policy after loading", len(res.Annotated), resolved)
			}
			for _, d := range s.Diagnostics {
				if d.Severity == policy.SeverityError && annotated[d.Operation] {
					t.Errorf("an annotated operation does not resolve: %s [%s]", d, d.Rule)
				}
			}
		})
	}
}
