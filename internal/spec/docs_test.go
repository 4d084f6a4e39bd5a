package spec

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/internal/policy"
)

// TestRuleTablesListEveryRule: docs/x-idempotency.md lists every error under "Validation rules"
// and every warning under "Lint warnings", once, and nothing else, so a new rule cannot ship
// undocumented.
func TestRuleTablesListEveryRule(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "x-idempotency.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([a-z0-9-]+)`")
	documented := map[policy.Severity][]string{}
	var section policy.Severity
	for _, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "## Validation rules"):
			section = policy.SeverityError
		case strings.HasPrefix(line, "## Lint warnings"):
			section = policy.SeverityWarning
		case strings.HasPrefix(line, "## "):
			section = ""
		}
		if m := row.FindStringSubmatch(line); m != nil && section != "" {
			documented[section] = append(documented[section], m[1])
		}
	}
	want := map[policy.Severity][]string{}
	for _, r := range policy.Rules() {
		want[r.Severity] = append(want[r.Severity], r.ID)
	}
	for _, sev := range []policy.Severity{policy.SeverityError, policy.SeverityWarning} {
		got := documented[sev]
		slices.Sort(got)
		slices.Sort(want[sev])
		if diff := cmp.Diff(want[sev], got); diff != "" {
			t.Errorf("%s rules (-) vs the rows of docs/x-idempotency.md (+):\n%s", sev, diff)
		}
	}
}
