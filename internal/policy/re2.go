package policy

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// RE2Form rewrites a key pattern that uses look-around, which Go's regexp (RE2) does not have,
// into an RE2 pattern that accepts exactly the same keys, when the look-around is of the shape key
// patterns use: anchored, looking ahead at the first character or behind at the last one, each
// a single character or class: ^(?!\s)(.*)(\S)$ ("no space at either end") becomes
// ^\S(.*\S)?$, ^(?![-_])[\w-]{1,40}$ becomes ^[0-9A-Za-z][\w-]{0,39}$ (written out as classes).
// ok is false for any other pattern: a look-around elsewhere, or over more than one character,
// a back-reference, flags that change what a character class means.
func RE2Form(pattern string) (re2 string, ok bool) {
	if !strings.HasPrefix(pattern, "^") || !strings.HasSuffix(pattern, "$") || strings.HasSuffix(pattern, `\$`) {
		return "", false
	}
	body := pattern[1 : len(pattern)-1]
	type look struct {
		neg   bool
		class []rune // the ranges of the one character it looks at
	}
	var ahead, behind []look
	// Look-aheads at the start: (?!X) or (?=X), X one character or class.
	for {
		neg := strings.HasPrefix(body, "(?!")
		if !neg && !strings.HasPrefix(body, "(?=") {
			break
		}
		end := groupEnd(body)
		if end < 0 {
			return "", false
		}
		cls, ok := oneChar(body[3:end])
		if !ok {
			return "", false
		}
		ahead = append(ahead, look{neg, cls})
		body = body[end+1:]
	}
	// Look-behinds at the end: (?<!X) or (?<=X).
	for strings.HasSuffix(body, ")") {
		start := strings.LastIndex(body, "(?<")
		if start < 0 || start+4 > len(body) || (body[start+3] != '!' && body[start+3] != '=') || groupEnd(body[start:]) != len(body)-start-1 {
			break
		}
		cls, ok := oneChar(body[start+4 : len(body)-1])
		if !ok {
			return "", false
		}
		behind = append(behind, look{body[start+3] == '!', cls})
		body = body[:start]
	}
	if len(ahead)+len(behind) == 0 {
		return "", false
	}
	re, err := syntax.Parse(body, syntax.Perl)
	if err != nil || !plain(re) {
		return "", false
	}
	re = dropCaptures(re)
	for _, l := range ahead {
		re = restrictEnd(re, l.class, l.neg, true)
	}
	for _, l := range behind {
		re = restrictEnd(re, l.class, l.neg, false)
	}
	if re.Op == syntax.OpNoMatch {
		return "", false // it accepts no key at all: nothing to rewrite it to
	}
	// Printed, parsed again (the parser factors common prefixes out of alternations: \S.*\S|\S
	// becomes \S(?:.*\S|)) and printed once more, tidy.
	again, err := syntax.Parse(print(re), syntax.Perl)
	if err != nil {
		return "", false
	}
	out := "^" + print(dropCaptures(again)) + "$"
	if _, err := regexp.Compile(out); err != nil {
		return "", false
	}
	return out, true
}

// groupEnd is the index of the parenthesis that closes the group s starts with, or -1.
func groupEnd(s string) int {
	depth := 0
	inClass := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
			if i+1 < len(s) && s[i+1] == ']' {
				i++
			}
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// oneChar reads x as a pattern of exactly one character, or class of characters: its ranges.
func oneChar(x string) ([]rune, bool) {
	re, err := syntax.Parse(x, syntax.Perl)
	if err != nil {
		return nil, false
	}
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	switch re.Op {
	case syntax.OpCharClass:
		return re.Rune, true
	case syntax.OpAnyCharNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}, true
	case syntax.OpAnyChar:
		return []rune{0, unicode.MaxRune}, true
	case syntax.OpLiteral:
		if len(re.Rune) == 1 && re.Flags&syntax.FoldCase == 0 {
			return []rune{re.Rune[0], re.Rune[0]}, true
		}
	}
	return nil, false
}

// plain reports a pattern made only of what restrictEnd understands: characters, classes,
// repetition, concatenation and alternation; no anchors or boundaries, no case folding.
func plain(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return false
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return false
		}
	}
	for _, s := range re.Sub {
		if !plain(s) {
			return false
		}
	}
	return true
}

func dropCaptures(re *syntax.Regexp) *syntax.Regexp {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	if len(re.Sub) == 0 {
		return re
	}
	c := *re
	c.Sub = make([]*syntax.Regexp, len(re.Sub))
	for i, s := range re.Sub {
		c.Sub[i] = dropCaptures(s)
	}
	return &c
}

func mk(op syntax.Op, sub ...*syntax.Regexp) *syntax.Regexp {
	return &syntax.Regexp{Op: op, Sub: sub, Flags: syntax.Perl}
}

func noMatch() *syntax.Regexp { return mk(syntax.OpNoMatch) }

// nullable reports whether re accepts the empty string.
func nullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpStar, syntax.OpQuest:
		return true
	case syntax.OpRepeat:
		return re.Min == 0 || nullable(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !nullable(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		return slices.ContainsFunc(re.Sub, nullable)
	case syntax.OpCapture, syntax.OpPlus:
		return nullable(re.Sub[0])
	case syntax.OpLiteral:
		return len(re.Rune) == 0
	}
	return false
}

// restrictEnd is re restricted by a look-around at one end (first: the first character, else
// the last) at a character in class (neg: not in class). A negative look-around also accepts the
// empty string, when re does.
func restrictEnd(re *syntax.Regexp, class []rune, neg, first bool) *syntax.Regexp {
	if neg {
		class = complement(class)
	}
	out := restrict(re, class, first)
	if neg && nullable(re) {
		out = alt(out, mk(syntax.OpEmptyMatch))
	}
	return out
}

// restrict is the regexp of the non-empty strings re accepts whose first (or last) character is
// in class.
func restrict(re *syntax.Regexp, class []rune, first bool) *syntax.Regexp {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return noMatch()
		}
		r := re.Rune[0]
		if !first {
			r = re.Rune[len(re.Rune)-1]
		}
		if !inClass(class, r) {
			return noMatch()
		}
		return re
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		mine, _ := oneCharOf(re)
		c := intersect(mine, class)
		if len(c) == 0 {
			return noMatch()
		}
		return &syntax.Regexp{Op: syntax.OpCharClass, Rune: c, Flags: syntax.Perl}
	case syntax.OpConcat:
		subs := re.Sub
		if len(subs) == 0 {
			return noMatch()
		}
		// The end piece restricted, with the rest; or, when the end piece can be empty, the rest
		// restricted alone.
		var head *syntax.Regexp
		var rest []*syntax.Regexp
		if first {
			head, rest = subs[0], subs[1:]
		} else {
			head, rest = subs[len(subs)-1], subs[:len(subs)-1]
		}
		restRe := concat(rest...)
		var out *syntax.Regexp
		if first {
			out = concat(restrict(head, class, first), restRe)
		} else {
			out = concat(restRe, restrict(head, class, first))
		}
		if nullable(head) {
			out = alt(out, restrict(restRe, class, first))
		}
		return out
	case syntax.OpAlternate:
		var subs []*syntax.Regexp
		for _, s := range re.Sub {
			subs = append(subs, restrict(s, class, first))
		}
		return alt(subs...)
	case syntax.OpStar, syntax.OpPlus:
		// x* and x+: the end iteration that is not empty restricted, any number of x beside it.
		star := mk(syntax.OpStar, re.Sub[0])
		if first {
			return concat(restrict(re.Sub[0], class, first), star)
		}
		return concat(star, restrict(re.Sub[0], class, first))
	case syntax.OpQuest:
		return restrict(re.Sub[0], class, first)
	case syntax.OpRepeat:
		if re.Max == 0 {
			return noMatch()
		}
		more := &syntax.Regexp{Op: syntax.OpRepeat, Sub: re.Sub, Min: max(re.Min-1, 0), Max: re.Max - 1, Flags: syntax.Perl}
		if re.Max < 0 {
			more.Max = -1
		}
		if first {
			return concat(restrict(re.Sub[0], class, first), more)
		}
		return concat(more, restrict(re.Sub[0], class, first))
	case syntax.OpCapture:
		return restrict(re.Sub[0], class, first)
	}
	return noMatch() // the empty string, or nothing
}

func oneCharOf(re *syntax.Regexp) ([]rune, bool) {
	switch re.Op {
	case syntax.OpCharClass:
		return re.Rune, true
	case syntax.OpAnyCharNotNL:
		return []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}, true
	case syntax.OpAnyChar:
		return []rune{0, unicode.MaxRune}, true
	}
	return nil, false
}

func concat(subs ...*syntax.Regexp) *syntax.Regexp {
	var out []*syntax.Regexp
	for _, s := range subs {
		switch s.Op {
		case syntax.OpNoMatch:
			return noMatch()
		case syntax.OpEmptyMatch:
			continue
		case syntax.OpConcat:
			out = append(out, s.Sub...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return mk(syntax.OpEmptyMatch)
	case 1:
		return out[0]
	}
	return mk(syntax.OpConcat, out...)
}

func alt(subs ...*syntax.Regexp) *syntax.Regexp {
	var out []*syntax.Regexp
	for _, s := range subs {
		switch s.Op {
		case syntax.OpNoMatch:
			continue
		case syntax.OpAlternate:
			out = append(out, s.Sub...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return noMatch()
	case 1:
		return out[0]
	}
	return mk(syntax.OpAlternate, out...)
}

func inClass(class []rune, r rune) bool {
	for i := 0; i+1 < len(class); i += 2 {
		if class[i] <= r && r <= class[i+1] {
			return true
		}
	}
	return false
}

// normal sorts and merges ranges.
func normal(class []rune) []rune {
	type rg struct{ lo, hi rune }
	var rs []rg
	for i := 0; i+1 < len(class); i += 2 {
		rs = append(rs, rg{class[i], class[i+1]})
	}
	slices.SortFunc(rs, func(a, b rg) int { return int(a.lo - b.lo) })
	var out []rune
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], r.hi)
			continue
		}
		out = append(out, r.lo, r.hi)
	}
	return out
}

func complement(class []rune) []rune {
	class = normal(class)
	var out []rune
	next := rune(0)
	for i := 0; i+1 < len(class); i += 2 {
		if class[i] > next {
			out = append(out, next, class[i]-1)
		}
		next = class[i+1] + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}

func intersect(a, b []rune) []rune {
	a, b = normal(a), normal(b)
	var out []rune
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
			if lo <= hi {
				out = append(out, lo, hi)
			}
		}
	}
	return normal(out)
}

// Classes printed by their Perl names.
var namedClasses = []struct {
	name  string
	class []rune
}{
	{`\s`, []rune{'\t', '\n', '\f', '\r', ' ', ' '}},
	{`\d`, []rune{'0', '9'}},
	{`\w`, []rune{'0', '9', 'A', 'Z', '_', '_', 'a', 'z'}},
}

func printClass(class []rune) string {
	class = normal(class)
	if slices.Equal(class, []rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}) {
		return "."
	}
	for _, n := range namedClasses {
		c := normal(n.class)
		if slices.Equal(class, c) {
			return n.name
		}
		if slices.Equal(class, complement(c)) {
			return strings.ToUpper(n.name)
		}
	}
	if len(class) == 2 && class[0] == class[1] {
		return regexp.QuoteMeta(string(class[0]))
	}
	neg := ""
	if len(class) > 0 && class[len(class)-1] == unicode.MaxRune {
		neg, class = "^", complement(class)
	}
	var b strings.Builder
	b.WriteString("[" + neg)
	for i := 0; i+1 < len(class); i += 2 {
		b.WriteString(classRune(class[i]))
		if class[i+1] != class[i] {
			if class[i+1] > class[i]+1 {
				b.WriteString("-")
			}
			b.WriteString(classRune(class[i+1]))
		}
	}
	b.WriteString("]")
	return b.String()
}

func classRune(r rune) string {
	switch {
	case r == '\t':
		return `\t`
	case r == '\n':
		return `\n`
	case r == '\f':
		return `\f`
	case r == '\r':
		return `\r`
	case strings.ContainsRune(`\-[]^`, r):
		return `\` + string(r)
	case r < ' ' || r == 0x7f || !unicode.IsPrint(r):
		return `\x{` + strconv.FormatInt(int64(r), 16) + `}`
	}
	return string(r)
}

// print writes re compactly: no capture groups (a key pattern only accepts or refuses), a group
// only where precedence needs one, x|empty as (x)?.
func print(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpNoMatch:
		return `[^\x00-\x{10FFFF}]`
	case syntax.OpEmptyMatch:
		return ""
	case syntax.OpLiteral:
		return regexp.QuoteMeta(string(re.Rune))
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		c, _ := oneCharOf(re)
		return printClass(c)
	case syntax.OpCapture:
		return print(re.Sub[0])
	case syntax.OpConcat:
		var b strings.Builder
		for _, s := range re.Sub {
			if s.Op == syntax.OpAlternate && !slices.ContainsFunc(s.Sub, func(x *syntax.Regexp) bool { return x.Op == syntax.OpEmptyMatch }) {
				b.WriteString("(" + print(s) + ")")
				continue
			}
			b.WriteString(print(s))
		}
		return b.String()
	case syntax.OpAlternate:
		var parts []string
		empty := false
		for _, s := range re.Sub {
			if s.Op == syntax.OpEmptyMatch {
				empty = true
				continue
			}
			parts = append(parts, print(s))
		}
		if empty {
			return repeatOf(strings.Join(parts, "|"), len(parts) == 1 && single(re.Sub[0]), "?")
		}
		return strings.Join(parts, "|")
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		op := map[syntax.Op]string{syntax.OpStar: "*", syntax.OpPlus: "+", syntax.OpQuest: "?"}[re.Op]
		if re.Op == syntax.OpRepeat {
			switch {
			case re.Max < 0:
				op = "{" + strconv.Itoa(re.Min) + ",}"
			case re.Min == re.Max:
				op = "{" + strconv.Itoa(re.Min) + "}"
			default:
				op = "{" + strconv.Itoa(re.Min) + "," + strconv.Itoa(re.Max) + "}"
			}
		}
		sub := re.Sub[0]
		for sub.Op == syntax.OpCapture {
			sub = sub.Sub[0]
		}
		return repeatOf(print(sub), single(sub), op)
	}
	return re.String()
}

func repeatOf(s string, single bool, op string) string {
	if single {
		return s + op
	}
	return "(" + s + ")" + op
}

// single reports a regexp printed as one atom, which a repetition may follow without a group.
func single(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return true
	case syntax.OpLiteral:
		return len(re.Rune) == 1
	case syntax.OpCapture:
		return single(re.Sub[0])
	}
	return false
}
