package spec

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestCorpus loads real public specs (testdata/corpus, copied with their licences): every one
// that a plain kin-openapi loader accepts must load here too, without panicking, and the summary
// of what the linter finds in each is pinned in testdata/corpus/want.txt.
func TestCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range files {
		switch filepath.Ext(f) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		l := openapi3.NewLoader()
		l.IsExternalRefsAllowed = true
		_, kinErr := l.LoadFromFile(f)
		s, err := Load(f, nil)
		if (kinErr == nil) != (err == nil) {
			t.Errorf("%s: kin-openapi error %v, Load error %v; want both or neither", f, kinErr, err)
			continue
		}
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s: does not load", filepath.ToSlash(f)))
			continue
		}
		counts := map[string]int{}
		for _, d := range s.Diagnostics {
			counts[d.Rule]++
		}
		var rules []string
		for r, n := range counts {
			rules = append(rules, fmt.Sprintf("%s=%d", r, n))
		}
		sort.Strings(rules)
		if len(rules) == 0 {
			rules = []string{"no findings"}
		}
		lines = append(lines, fmt.Sprintf("%s: %d operations, %d idempotent; %s",
			filepath.ToSlash(f), len(s.Model.Operations), len(s.Model.Idempotent()), strings.Join(rules, " ")))
	}
	if len(lines) < 8 {
		t.Fatalf("only %d corpus files found", len(lines))
	}
	golden(t, filepath.Join("testdata", "corpus", "want.txt"), strings.Join(lines, "\n"))
}
