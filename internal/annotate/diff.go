package annotate

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
)

// UnifiedDiff returns the changes from before to after as a unified diff with three lines of
// context, named like git's (a/name, b/name) for relative paths; "" when nothing changed.
//
// difflib's own writer treats lines that occur often (a closing brace, "content:") as junk,
// which turns pure insertions into confusing replacements on large specs; the matcher runs
// without that heuristic here, so the diff shows exactly the added lines.
func UnifiedDiff(name string, before, after []byte) (string, error) {
	if string(before) == string(after) {
		return "", nil
	}
	from, to := filepath.ToSlash(name), filepath.ToSlash(name)
	if !filepath.IsAbs(name) {
		from, to = "a/"+from, "b/"+to
	}
	a, b := splitKeepEnds(string(before)), splitKeepEnds(string(after))
	var w strings.Builder
	fmt.Fprintf(&w, "--- %s\n+++ %s\n", from, to)
	line := func(prefix, l string) {
		w.WriteString(prefix + l)
		if !strings.HasSuffix(l, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
	m := difflib.NewMatcherWithJunk(a, b, false, nil)
	for _, g := range m.GetGroupedOpCodes(3) {
		first, last := g[0], g[len(g)-1]
		fmt.Fprintf(&w, "@@ -%s +%s @@\n", hunkRange(first.I1, last.I2), hunkRange(first.J1, last.J2))
		for _, c := range g {
			if c.Tag == 'e' {
				for _, l := range a[c.I1:c.I2] {
					line(" ", l)
				}
				continue
			}
			if c.Tag == 'r' || c.Tag == 'd' {
				for _, l := range a[c.I1:c.I2] {
					line("-", l)
				}
			}
			if c.Tag == 'r' || c.Tag == 'i' {
				for _, l := range b[c.J1:c.J2] {
					line("+", l)
				}
			}
		}
	}
	return w.String(), nil
}

func splitKeepEnds(s string) []string {
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// hunkRange formats a hunk's line range the way diff -u does.
func hunkRange(i1, i2 int) string {
	start, n := i1+1, i2-i1
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start-1)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}
