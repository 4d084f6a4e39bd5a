package spec

import (
	"github.com/idemgen/idemgen/internal/policy"

	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the want.txt files from the current output")

// Folders of testdata that are not rule cases.
var notRules = []string{"valid", "load", "corpus"}

// TestRuleGolden runs every testdata/<rule>/openapi.yaml and compares all its diagnostics with
// want.txt, then checks that the case really triggers its rule.
func TestRuleGolden(t *testing.T) {
	t.Parallel()
	for _, rule := range ruleDirs(t) {
		t.Run(rule, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("testdata", rule)
			s, err := Load(filepath.Join(dir, "openapi.yaml"), nil)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			var lines []string
			found := false
			for _, d := range s.Diagnostics {
				lines = append(lines, d.String())
				found = found || d.Rule == rule
			}
			golden(t, filepath.Join(dir, "want.txt"), strings.Join(lines, "\n"))
			if !found {
				t.Errorf("no %s diagnostic in %s", rule, dir)
			}
		})
	}
}

// TestEveryRuleHasACase fails when a rule is added without a golden case, or a case folder names
// no rule.
func TestEveryRuleHasACase(t *testing.T) {
	t.Parallel()
	var ids []string
	for _, r := range policy.Rules() {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	dirs := ruleDirs(t)
	slices.Sort(dirs)
	if diff := cmp.Diff(ids, dirs); diff != "" {
		t.Errorf("rule ids (-) vs testdata folders (+):\n%s", diff)
	}
}

// TestLoadErrors pins the error of every document Load must refuse: testdata/load/<case>/.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(filepath.Join("testdata", "load"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("testdata", "load", e.Name())
			spec := filepath.Join(dir, "openapi.yaml")
			if _, err := os.Stat(spec); err != nil {
				spec = filepath.Join(dir, "openapi.json")
			}
			s, err := Load(spec, nil)
			if err == nil {
				t.Fatalf("Load succeeded with %d diagnostics; want an error", len(s.Diagnostics))
			}
			golden(t, filepath.Join(dir, "want.txt"), err.Error())
		})
	}
}

func ruleDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(notRules, e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if got != "" {
		got += "\n"
	}
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}
