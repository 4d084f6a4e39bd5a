package policy

import (
	"regexp"
	"testing"
)

// TestRE2Form: the look-around shapes key patterns use are rewritten into RE2, and the rewrite
// accepts exactly the keys the original does: checked against the look-around's definition
// (the body matches and the first, or last, character is, or is not, in the class) on every
// string of up to five characters from an alphabet of letters, digits, punctuation and spaces.
// Other patterns are not rewritten.
func TestRE2Form(t *testing.T) {
	type end struct {
		class string // a one-character pattern; "" when the pattern has no look-around there
		neg   bool
	}
	cases := []struct {
		pattern, want string
		body          string // the pattern without its look-arounds and anchors
		ahead, behind end
	}{
		{`^(?!\s)(.*)(\S)$`, `^\S(.*\S)?$`, `(.*)(\S)`, end{`\s`, true}, end{}},
		{`^(?!\s).*$`, `^(\S.*)?$`, `.*`, end{`\s`, true}, end{}},
		{`^(?![-_])[A-Za-z0-9_-]{1,40}$`, `^[0-9A-Za-z][\-0-9A-Z_a-z]{0,39}$`, `[A-Za-z0-9_-]{1,40}`, end{`[-_]`, true}, end{}},
		{`^[a-z0-9-]+(?<!-)$`, `^[\-0-9a-z]*[0-9a-z]$`, `[a-z0-9-]+`, end{}, end{`-`, true}},
		{`^(?!-)[a-z0-9-]+(?<!-)$`, `^[0-9a-z]([\-0-9a-z]*[0-9a-z])?$`, `[a-z0-9-]+`, end{`-`, true}, end{`-`, true}},
		{`^(?=[A-Z])\w{3,}$`, `^[A-Z]\w{2,}$`, `\w{3,}`, end{`[A-Z]`, false}, end{}},
		{`^(?!_)(a|_b|-)*$`, ``, `(a|_b|-)*`, end{`_`, true}, end{}},
	}
	alphabet := []rune{'a', 'Z', '0', '-', '_', ' ', '\t', '\n', 'é'}
	var all []string
	var grow func(prefix string, n int)
	grow = func(prefix string, n int) {
		all = append(all, prefix)
		if n == 0 {
			return
		}
		for _, r := range alphabet {
			grow(prefix+string(r), n-1)
		}
	}
	grow("", 5)
	for _, c := range cases {
		got, ok := RE2Form(c.pattern)
		if !ok {
			t.Errorf("RE2Form(%s): not rewritten", c.pattern)
			continue
		}
		if c.want != "" && got != c.want {
			t.Errorf("RE2Form(%s) = %s, want %s", c.pattern, got, c.want)
		}
		re2 := regexp.MustCompile(got)
		body := regexp.MustCompile(`^(?:` + c.body + `)$`)
		holds := func(e end, s string, first bool) bool {
			if e.class == "" {
				return true
			}
			if s == "" {
				return e.neg
			}
			r := []rune(s)
			ch := r[0]
			if !first {
				ch = r[len(r)-1]
			}
			in := regexp.MustCompile(`^` + e.class + `$`).MatchString(string(ch))
			return in != e.neg
		}
		for _, s := range all {
			want := body.MatchString(s) && holds(c.ahead, s, true) && holds(c.behind, s, false)
			if re2.MatchString(s) != want {
				t.Errorf("RE2Form(%s) = %s: on %q it says %v, the look-around %v", c.pattern, got, s, !want, want)
				break
			}
		}
	}
	for _, p := range []string{`^(?=.*\S).*$`, `^[a-z]+$`, `(?!\s).*\S`, `^(?!ab)\w+$`, `^(\w)\1$`, `^(?i)(?!a)\w+$`} {
		if got, ok := RE2Form(p); ok {
			t.Errorf("RE2Form(%s) = %s, want no rewrite", p, got)
		}
	}
}
