package annotate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
			checkLint(t, file, res.Output)
		}
	}
}

// FuzzAnnotate feeds mangled documents to Annotate: it must never panic, and whatever it accepts
// must come out only with lines added and unchanged by a second run.
func FuzzAnnotate(f *testing.F) {
	docs, _ := filepath.Glob("testdata/specs/*")
	for _, d := range docs {
		if b, err := os.ReadFile(d); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		res, err := Annotate("fuzz.yaml", in, Options{})
		if err != nil {
			return
		}
		if !res.Changed() {
			if !bytes.Equal(res.Output, in) {
				t.Fatal("output differs although nothing was annotated")
			}
			return
		}
		again, err := Annotate("fuzz.yaml", res.Output, Options{})
		if err != nil {
			t.Fatalf("second run: %v", err)
		}
		if !bytes.Equal(again.Output, res.Output) {
			t.Fatalf("second run changed the output")
		}
	})
}
