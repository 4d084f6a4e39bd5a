package idem

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// canonicalJSONScan canonicalises a JSON body in one pass over its bytes, with the output of
// [canonicalJSONTree]: members sorted by their decoded names, no white space, numbers as
// [canonicalNumber] spells them, strings as encoding/json writes them, excluded pointers left
// out (an object member) or null (an array element). It is strict in the same way, and
// stricter where that is simpler: ok is false for anything it does not accept (invalid JSON,
// a duplicate member, too deep, an exclusion that is not a pointer, more than 64 exclusions), and
// the tree then decides, so an error is always the tree's.
//
// raw must be valid UTF-8 (canonicalJSONBody checks it first).
func canonicalJSONScan(raw []byte, exclude []string) (out []byte, ok bool) {
	// The scanner lives on the heap (its recursive methods keep its address), so the room it
	// needs for a usual body is part of it: one allocation, not one per slice.
	s := &jsonScan{in: raw, out: make([]byte, 0, len(raw))}
	s.members = s.memberRoom[:0]
	whole := false // "" excludes the whole body, which must still be valid
	if len(exclude) > 0 {
		if len(exclude) > 64 {
			return nil, false
		}
		n := 0
		for _, p := range exclude {
			n += strings.Count(p, "/")
		}
		s.exclude = s.excludeRoom[:0]
		if len(exclude) > len(s.excludeRoom) {
			s.exclude = make([][]string, 0, len(exclude))
		}
		s.exclude = s.exclude[:len(exclude)]
		tokens := s.tokenRoom[:0] // every pointer's tokens, in one array
		if n > len(s.tokenRoom) {
			tokens = make([]string, 0, n)
		}
		for i, p := range exclude {
			switch {
			case p == "":
				whole = true
			case p[0] != '/':
				return nil, false
			default:
				start := len(tokens)
				tokens = appendPointerTokens(tokens, p)
				s.exclude[i] = tokens[start:len(tokens):len(tokens)]
				s.live |= 1 << i
			}
		}
		if whole {
			s.live = 0
		}
	}
	s.space()
	if !s.value(0, s.live) {
		return nil, false
	}
	if s.space(); s.pos != len(s.in) {
		return nil, false
	}
	if whole {
		return []byte("null"), true
	}
	return s.out, true
}

// appendPointerTokens appends an RFC 6901 pointer's reference tokens, unescaped as
// removePointer does.
func appendPointerTokens(tokens []string, ptr string) []string {
	for t := range strings.SplitSeq(ptr[1:], "/") {
		if strings.Contains(t, "~") {
			t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		}
		tokens = append(tokens, t)
	}
	return tokens
}

type jsonScan struct {
	in  []byte
	pos int
	out []byte
	// members is a stack of the members of the objects being read, innermost last.
	members []scanMember
	scratch []byte
	// exclude are the pointers' tokens (nil for ""); live, given to each value, has bit i set
	// when pointer i names a place inside that value (its tokens so far matched the path).
	exclude [][]string
	live    uint64

	// Room for members, exclude and the pointers' tokens, enough for most bodies and policies.
	memberRoom  [8]scanMember
	excludeRoom [2][]string
	tokenRoom   [4]string
}

// scanMember is one object member: its decoded name, and where its `"name":value` is in out
// (start == end: excluded, kept only to find duplicates).
type scanMember struct {
	key        []byte
	start, end int
}

func (s *jsonScan) space() {
	for s.pos < len(s.in) {
		switch s.in[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value reads one value at depth and writes its canonical form; live are the pointers that name
// something inside it.
func (s *jsonScan) value(depth int, live uint64) bool {
	if depth > maxDepth || s.pos >= len(s.in) {
		return false
	}
	switch c := s.in[s.pos]; {
	case c == '{':
		return s.object(depth, live)
	case c == '[':
		return s.array(depth, live)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *jsonScan) literal(lit string) bool {
	if !bytes.HasPrefix(s.in[s.pos:], []byte(lit)) {
		return false
	}
	s.pos += len(lit)
	s.out = append(s.out, lit...)
	return true
}

// number reads a number by JSON's grammar and writes its one spelling.
func (s *jsonScan) number() bool {
	in, i := s.in, s.pos
	if i < len(in) && in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	plain := true
	if i < len(in) && in[i] == '.' {
		i++
		plain = false
		if digits() == 0 {
			return false
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		plain = false
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	lit := in[s.pos:i]
	s.pos = i
	if plain && len(bytes.TrimPrefix(lit, []byte("-"))) <= maxPlainDigits && string(lit) != "-0" {
		s.out = append(s.out, lit...) // canonicalNumber keeps these as they are
		return true
	}
	s.out = append(s.out, canonicalNumber(json.Number(lit))...)
	return true
}

// str reads a string and writes it as encoding/json encodes its value; key is the value.
// A string with escapes, or with a character encoding/json escapes (<, >, &, U+2028, U+2029),
// is decoded and encoded by encoding/json itself; any other is its own encoding.
func (s *jsonScan) str() (key []byte, ok bool) {
	in, i := s.in, s.pos+1
	plain := true
	for ; i < len(in); i++ {
		switch c := in[i]; {
		case c == '"':
			lit := in[s.pos : i+1]
			s.pos = i + 1
			if plain {
				s.out = append(s.out, lit...)
				return lit[1 : len(lit)-1], true
			}
			var v string
			if json.Unmarshal(lit, &v) != nil {
				return nil, false
			}
			enc, err := json.Marshal(v)
			if err != nil {
				return nil, false
			}
			s.out = append(s.out, enc...)
			return []byte(v), true
		case c < 0x20:
			return nil, false // a control character must be escaped
		case c == '\\':
			plain = false
			i++
			if i >= len(in) {
				return nil, false
			}
			switch in[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(in) {
					return nil, false
				}
				for _, h := range in[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return nil, false
					}
				}
				i += 4
			default:
				return nil, false
			}
		case c == '<' || c == '>' || c == '&':
			plain = false
		case c == 0xE2 && i+2 < len(in) && in[i+1] == 0x80 && (in[i+2] == 0xA8 || in[i+2] == 0xA9):
			plain = false // U+2028, U+2029
		}
	}
	return nil, false
}

func (s *jsonScan) array(depth int, live uint64) bool {
	s.pos++ // [
	s.out = append(s.out, '[')
	s.space()
	if s.pos < len(s.in) && s.in[s.pos] == ']' {
		s.pos++
		s.out = append(s.out, ']')
		return true
	}
	for i := 0; ; i++ {
		if i > 0 {
			s.out = append(s.out, ',')
		}
		var inner uint64
		excluded := false
		if live != 0 {
			inner, excluded = s.step(depth, live, func(tok string) bool {
				n, ok := arrayIndex(tok, i+1)
				return ok && n == i
			})
		}
		mark := len(s.out)
		if !s.value(depth+1, inner) {
			return false
		}
		if excluded {
			s.out = append(s.out[:mark], "null"...)
		}
		s.space()
		if s.pos >= len(s.in) {
			return false
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
			s.space()
		case ']':
			s.pos++
			s.out = append(s.out, ']')
			return true
		default:
			return false
		}
	}
}

// step is the pointers live inside a child of a value at depth whose own pointers are live, and
// whether one of them names the child itself; matches says whether a token names the child.
func (s *jsonScan) step(depth int, live uint64, matches func(string) bool) (inner uint64, excluded bool) {
	for i := 0; live != 0 && i < len(s.exclude); i++ {
		if live&(1<<i) == 0 {
			continue
		}
		toks := s.exclude[i]
		if len(toks) <= depth || !matches(toks[depth]) {
			continue
		}
		if len(toks) == depth+1 {
			excluded = true
		} else {
			inner |= 1 << i
		}
	}
	return inner, excluded
}

func (s *jsonScan) object(depth int, live uint64) bool {
	s.pos++ // {
	start := len(s.out)
	s.out = append(s.out, '{')
	base := len(s.members)
	defer func() { s.members = s.members[:base] }()
	s.space()
	if s.pos < len(s.in) && s.in[s.pos] == '}' {
		s.pos++
		s.out = append(s.out, '}')
		return true
	}
	written := 0
	for {
		if s.pos >= len(s.in) || s.in[s.pos] != '"' {
			return false
		}
		comma := len(s.out)
		if written > 0 {
			s.out = append(s.out, ',')
		}
		m := scanMember{start: len(s.out)}
		key, ok := s.str()
		if !ok {
			return false
		}
		m.key = key
		s.space()
		if s.pos >= len(s.in) || s.in[s.pos] != ':' {
			return false
		}
		s.pos++
		s.out = append(s.out, ':')
		s.space()
		var inner uint64
		excluded := false
		if live != 0 {
			inner, excluded = s.step(depth, live, func(tok string) bool { return tok == string(key) })
		}
		if !s.value(depth+1, inner) {
			return false
		}
		if excluded {
			s.out = s.out[:comma]
			m.start = comma
		} else {
			written++
		}
		m.end = len(s.out)
		s.members = append(s.members, m)
		s.space()
		if s.pos >= len(s.in) {
			return false
		}
		switch s.in[s.pos] {
		case ',':
			s.pos++
			s.space()
			continue
		case '}':
			s.pos++
		default:
			return false
		}
		break
	}
	return s.sortMembers(start, s.members[base:])
}

// sortMembers closes the object that starts at out[start] with its members ms, in the order of
// their names; false when a name appears twice.
func (s *jsonScan) sortMembers(start int, ms []scanMember) bool {
	inOrder := true
	for i := 1; i < len(ms) && inOrder; i++ {
		inOrder = bytes.Compare(ms[i-1].key, ms[i].key) < 0
	}
	if inOrder {
		// Written in order already (an excluded member left nothing, not even its comma).
		s.out = append(s.out, '}')
		return true
	}
	slices.SortFunc(ms, func(a, b scanMember) int { return bytes.Compare(a.key, b.key) })
	for i := 1; i < len(ms); i++ {
		if bytes.Equal(ms[i-1].key, ms[i].key) {
			return false
		}
	}
	// Each member's bytes (which leave out the comma before it) move to their sorted place.
	s.scratch = append(s.scratch[:0], s.out[start:]...)
	s.out = append(s.out[:start], '{')
	n := 0
	for _, m := range ms {
		if m.start == m.end {
			continue
		}
		if n > 0 {
			s.out = append(s.out, ',')
		}
		s.out = append(s.out, s.scratch[m.start-start:m.end-start]...)
		n++
	}
	s.out = append(s.out, '}')
	return true
}
