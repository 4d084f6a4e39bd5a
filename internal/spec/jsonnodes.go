package spec

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// jsonNodes builds, for a JSON document, the node tree parseTree's slow path builds: yaml.v3's
// when yaml.v3 reads the document, the token walker's (jsonTree) when it refuses it. It is a
// single pass over the bytes, several times faster than yaml.v3 on a large spec, whose positions
// every diagnostic depends on.
//
// Both of those agree with JSON on what strict JSON means, with a few exceptions where yaml.v3
// reads the same bytes differently; jsonNodes returns false for those, and for anything that is
// not strict JSON, and parseTree then takes the slow path:
//   - a byte order mark, a carriage return not followed by a line feed, or U+0085, U+2028,
//     U+2029 (YAML line breaks, so yaml.v3 counts lines differently);
//   - an integer beyond int64 (yaml.v3 tags it !!int or !!float, the walker !!float) or a number
//     beyond float64 (yaml.v3 reads it as a string);
//   - invalid UTF-8, and nesting deeper than maxJSONDepth.
//
// Lines and columns are 1-based, columns counted in characters, as yaml.v3 counts them.
func jsonNodes(data []byte) (*yaml.Node, bool) {
	// Values are slices of one copy of the document, and nodes and their children come out of
	// blocks, rather than an allocation each: a 0.9 MB spec has some 80,000 nodes.
	p := &jsonParser{data: data, text: string(data), line: 1, col: 1}
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != '{' {
		return nil, false
	}
	root := p.value(0)
	if p.failed {
		return nil, false
	}
	p.space()
	if p.failed || p.pos != len(p.data) {
		return nil, false
	}
	return root, true
}

// maxJSONDepth bounds the recursion; real specs nest a few dozen levels.
const maxJSONDepth = 500

type jsonParser struct {
	data   []byte
	text   string // data, for values that need no decoding
	nodes  []yaml.Node
	kids   []*yaml.Node // children of the collections being read, innermost last
	block  []*yaml.Node // where finished collections' children are carved from
	pos    int          // next byte to read
	line   int          // line of pos
	col    int          // column of pos, in characters
	failed bool
}

// node returns a new node at the current position.
func (p *jsonParser) node() *yaml.Node {
	if len(p.nodes) == 0 {
		p.nodes = make([]yaml.Node, 1024)
	}
	n := &p.nodes[0]
	p.nodes = p.nodes[1:]
	n.Line, n.Column = p.line, p.col
	return n
}

// children moves the children read since mark off the stack into a slice of their own.
func (p *jsonParser) children(mark int) []*yaml.Node {
	k := len(p.kids) - mark
	if k == 0 {
		return nil
	}
	if len(p.block) < k {
		p.block = make([]*yaml.Node, max(k, 4096))
	}
	out := p.block[:k:k]
	p.block = p.block[k:]
	copy(out, p.kids[mark:])
	clear(p.kids[mark:])
	p.kids = p.kids[:mark]
	return out
}

// space skips JSON whitespace, keeping line and column.
func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t':
			p.col++
		case '\n':
			p.line++
			p.col = 1
		case '\r':
			if p.pos+1 >= len(p.data) || p.data[p.pos+1] != '\n' {
				p.failed = true // a lone CR: a line break for YAML, a space for JSON
				return
			}
		default:
			return
		}
		p.pos++
	}
}

// value reads the value at pos (whitespace already skipped).
func (p *jsonParser) value(depth int) *yaml.Node {
	if p.pos >= len(p.data) || depth > maxJSONDepth {
		p.failed = true
		return nil
	}
	mark := len(p.kids)
	switch c := p.data[p.pos]; {
	case c == '{':
		n := p.node()
		n.Kind, n.Tag, n.Style = yaml.MappingNode, "!!map", yaml.FlowStyle
		p.advance(1)
		p.space()
		if p.peek('}') {
			p.advance(1)
			return n
		}
		for !p.failed {
			if !p.peek('"') {
				p.failed = true
				return nil
			}
			k := p.scalar()
			p.space()
			if !p.peek(':') {
				p.failed = true
				return nil
			}
			p.advance(1)
			p.space()
			v := p.value(depth + 1)
			if p.failed {
				return nil
			}
			p.kids = append(p.kids, k, v)
			if p.separator('}') {
				n.Content = p.children(mark)
				return n
			}
		}
		return nil
	case c == '[':
		n := p.node()
		n.Kind, n.Tag, n.Style = yaml.SequenceNode, "!!seq", yaml.FlowStyle
		p.advance(1)
		p.space()
		if p.peek(']') {
			p.advance(1)
			return n
		}
		for !p.failed {
			v := p.value(depth + 1)
			if p.failed {
				return nil
			}
			p.kids = append(p.kids, v)
			if p.separator(']') {
				n.Content = p.children(mark)
				return n
			}
		}
		return nil
	default:
		return p.scalar()
	}
}

// separator reads what follows a member or an element: a comma (false: more follow) or close
// (true: the end). Anything else fails the parse.
func (p *jsonParser) separator(close byte) (end bool) {
	p.space()
	switch {
	case p.peek(','):
		p.advance(1)
		p.space()
	case p.peek(close):
		p.advance(1)
		return true
	default:
		p.failed = true
	}
	return false
}

func (p *jsonParser) peek(c byte) bool { return p.pos < len(p.data) && p.data[p.pos] == c }

// advance moves over n ASCII bytes of one line.
func (p *jsonParser) advance(n int) {
	p.pos += n
	p.col += n
}

// scalar reads a string, number, true, false or null at pos.
func (p *jsonParser) scalar() *yaml.Node {
	n := p.node()
	n.Kind = yaml.ScalarNode
	d := p.data
	start := p.pos
	switch c := d[start]; {
	case c == '"':
		s, ok := p.str()
		if !ok {
			p.failed = true
			return nil
		}
		n.Tag, n.Value, n.Style = "!!str", s, yaml.DoubleQuotedStyle
	case c == '-' || '0' <= c && c <= '9':
		end, float := numberEnd(d, start)
		if end < 0 {
			p.failed = true
			return nil
		}
		text := p.text[start:end]
		switch {
		case !float:
			if _, err := strconv.ParseInt(text, 10, 64); err != nil {
				p.failed = true // beyond int64
				return nil
			}
			n.Tag = "!!int"
		default:
			if _, err := strconv.ParseFloat(text, 64); err != nil {
				p.failed = true // beyond float64
				return nil
			}
			n.Tag = "!!float"
		}
		n.Value = text
		p.advance(end - start)
	default:
		for _, lit := range [...]struct{ text, tag string }{{"true", "!!bool"}, {"false", "!!bool"}, {"null", "!!null"}} {
			if len(d)-start >= len(lit.text) && string(d[start:start+len(lit.text)]) == lit.text {
				n.Tag, n.Value = lit.tag, lit.text
				p.advance(len(lit.text))
				return n
			}
		}
		p.failed = true
		return nil
	}
	return n
}

// numberEnd returns the end of the JSON number starting at i, and whether it has a fraction or
// an exponent; -1 when it is not a JSON number.
func numberEnd(d []byte, i int) (int, bool) {
	digits := func(i int) int {
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return i
	}
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(i)
	default:
		return -1, false
	}
	float := false
	if i < len(d) && d[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return -1, false
		}
		i, float = j, true
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return -1, false
		}
		i, float = j, true
	}
	return i, float
}

// str reads the string at pos, which is its opening quote, and moves past it. Escapes are
// decoded by encoding/json, whose rules (surrogate pairs, lone surrogates) the token walker
// follows; yaml.v3 refuses those, and agrees on the others.
func (p *jsonParser) str() (string, bool) {
	d := p.data
	start := p.pos
	i := start + 1
	chars := 1 // the opening quote
	escaped := false
	for {
		if i >= len(d) {
			return "", false
		}
		c := d[i]
		switch {
		case c == '"':
			i++
			chars++
			p.pos, p.col = i, p.col+chars
			if !escaped {
				return p.text[start+1 : i-1], true
			}
			var s string
			if err := json.Unmarshal(d[start:i], &s); err != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			if i+1 >= len(d) {
				return "", false
			}
			escaped = true
			i += 2 // the escaped byte is ASCII in any valid escape; json.Unmarshal checks it
			chars += 2
		case c < 0x20:
			return "", false // a raw control character: not JSON
		case c < utf8.RuneSelf:
			i++
			chars++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 || r == 0x85 || r == 0x2028 || r == 0x2029 {
				return "", false
			}
			i += size
			chars++
		}
	}
}
