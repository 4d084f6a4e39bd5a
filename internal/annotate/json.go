package annotate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// jsonDoc is a JSON document parsed by a small recursive-descent reader that keeps the byte span
// of every value, so additions can be spliced in with the file's own indentation and spacing.
type jsonDoc struct {
	data  []byte
	lines []int
	root  *node
	st    jsonStyle
	pos   int
}

// jsonStyle is how the file writes JSON.
type jsonStyle struct {
	unit    string // one level of indentation ("  ", "    ", "\t")
	colon   string // between a key and its value: ": ", " : ", ":"
	jackson bool   // arrays open inline, "[ {" … "}, {" … "} ]", as Jackson's pretty printer does
	compact bool   // no line breaks at all
	nl      string
}

func parseJSON(data []byte) (*jsonDoc, error) {
	d := &jsonDoc{data: data, lines: lineStarts(data)}
	d.skipWS()
	root, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipWS()
	if d.pos != len(d.data) {
		return nil, d.errorf("unexpected %q after the document", d.data[d.pos])
	}
	d.root = root
	d.st = d.detectStyle()
	if !d.st.compact {
		d.markInline(root)
	}
	return d, nil
}

func (d *jsonDoc) lineCol(off int) (int, int) {
	l := sort.Search(len(d.lines), func(i int) bool { return d.lines[i] > off })
	return l, off - d.lines[l-1] + 1
}

func (d *jsonDoc) errorf(format string, args ...any) error {
	l, c := d.lineCol(d.pos)
	return fmt.Errorf("not valid JSON at line %d, column %d: %s", l, c, fmt.Sprintf(format, args...))
}

func (d *jsonDoc) skipWS() {
	for d.pos < len(d.data) && isSpace(d.data[d.pos]) {
		d.pos++
	}
}

func (d *jsonDoc) value(depth int) (*node, error) {
	if depth > maxDepth {
		return nil, d.errorf("nesting too deep")
	}
	if d.pos >= len(d.data) {
		return nil, d.errorf("unexpected end of input")
	}
	n := &node{start: d.pos, depth: depth}
	n.line, n.col = d.lineCol(d.pos)
	switch c := d.data[d.pos]; {
	case c == '{':
		n.kind = kindMap
		d.pos++
		d.skipWS()
		if d.pos < len(d.data) && d.data[d.pos] == '}' {
			d.pos++
			break
		}
		for {
			d.skipWS()
			if d.pos >= len(d.data) || d.data[d.pos] != '"' {
				return nil, d.errorf("expected a string key")
			}
			keyStart := d.pos
			key, err := d.str()
			if err != nil {
				return nil, err
			}
			l, c := d.lineCol(keyStart)
			d.skipWS()
			if d.pos >= len(d.data) || d.data[d.pos] != ':' {
				return nil, d.errorf("expected ':' after a key")
			}
			d.pos++
			d.skipWS()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.entries = append(n.entries, &entry{key: key, keyLine: l, keyCol: c, keyStart: keyStart, value: v})
			d.skipWS()
			if d.pos < len(d.data) && d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.pos < len(d.data) && d.data[d.pos] == '}' {
				d.pos++
				break
			}
			return nil, d.errorf("expected ',' or '}'")
		}
	case c == '[':
		n.kind = kindSeq
		d.pos++
		d.skipWS()
		if d.pos < len(d.data) && d.data[d.pos] == ']' {
			d.pos++
			break
		}
		for {
			d.skipWS()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, v)
			d.skipWS()
			if d.pos < len(d.data) && d.data[d.pos] == ',' {
				d.pos++
				continue
			}
			if d.pos < len(d.data) && d.data[d.pos] == ']' {
				d.pos++
				break
			}
			return nil, d.errorf("expected ',' or ']'")
		}
	case c == '"':
		n.kind = kindScalar
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		n.value = s
	default:
		n.kind = kindScalar
		start := d.pos
		for d.pos < len(d.data) && !isSpace(d.data[d.pos]) && !strings.ContainsRune(",]}", rune(d.data[d.pos])) {
			d.pos++
		}
		lit := string(d.data[start:d.pos])
		var x any
		if err := json.Unmarshal([]byte(lit), &x); err != nil || lit == "" {
			d.pos = start
			return nil, d.errorf("unexpected %q", lit)
		}
		n.value = lit
		n.null = lit == "null"
	}
	n.end = d.pos
	return n, nil
}

func (d *jsonDoc) str() (string, error) {
	start := d.pos
	d.pos++
	for d.pos < len(d.data) && d.data[d.pos] != '"' {
		if d.data[d.pos] == '\\' {
			d.pos++
		}
		d.pos++
	}
	if d.pos >= len(d.data) {
		d.pos = start
		return "", d.errorf("string is not closed")
	}
	d.pos++
	var s string
	if err := json.Unmarshal(d.data[start:d.pos], &s); err != nil {
		d.pos = start
		return "", d.errorf("bad string: %v", err)
	}
	return s, nil
}

// lineIndent is the leading whitespace of the line holding off.
func (d *jsonDoc) lineIndent(off int) string {
	l, _ := d.lineCol(off)
	start := d.lines[l-1]
	end := start
	for end < len(d.data) && (d.data[end] == ' ' || d.data[end] == '\t') {
		end++
	}
	return string(d.data[start:end])
}

// firstOnLine reports whether only whitespace precedes off on its line.
func (d *jsonDoc) firstOnLine(off int) bool {
	l, _ := d.lineCol(off)
	return strings.TrimSpace(string(d.data[d.lines[l-1]:off])) == ""
}

// markInline flags objects and arrays written on one line with their parent ({"a": 1}, {}): adding
// to them would rewrite that line, so optional additions leave them alone.
func (d *jsonDoc) markInline(n *node) {
	switch {
	case n.kind == kindMap && len(n.entries) == 0, n.kind == kindSeq && len(n.items) == 0:
		n.flow = true
	case n.kind == kindMap:
		n.flow = !d.firstOnLine(n.entries[0].keyStart)
	case n.kind == kindSeq:
		n.flow = !d.firstOnLine(n.items[0].start) && !d.st.jackson
	}
	for _, e := range n.entries {
		d.markInline(e.value)
	}
	for _, it := range n.items {
		d.markInline(it)
	}
}

func (d *jsonDoc) detectStyle() jsonStyle {
	st := jsonStyle{unit: "  ", colon: ": ", nl: "\n"}
	if bytes.IndexByte(d.data, '\n') < 0 {
		st.compact = true
		st.colon = ":"
		return st
	}
	if i := bytes.IndexByte(d.data, '\n'); i > 0 && d.data[i-1] == '\r' {
		st.nl = "\r\n"
	}
	r := d.root
	if r.kind == kindMap && len(r.entries) > 0 {
		e := r.entries[0]
		if ind := d.lineIndent(e.keyStart); ind != "" && d.firstOnLine(e.keyStart) {
			st.unit = strings.TrimPrefix(ind, d.lineIndent(r.start))
			if st.unit == "" {
				st.unit = ind
			}
		}
		// The bytes between the key's closing quote and the value.
		keyEnd := e.keyStart + 1
		for keyEnd < len(d.data) && d.data[keyEnd] != '"' {
			if d.data[keyEnd] == '\\' {
				keyEnd++
			}
			keyEnd++
		}
		if sep := string(d.data[keyEnd+1 : e.value.start]); !strings.ContainsAny(sep, "\r\n") {
			st.colon = sep
		}
	}
	// Jackson style shows as an array whose first element starts on the bracket's line.
	var find func(n *node) bool
	find = func(n *node) bool {
		if n.kind == kindSeq && len(n.items) > 0 && n.items[0].kind == kindMap {
			st.jackson = !d.firstOnLine(n.items[0].start)
			return true
		}
		for _, e := range n.entries {
			if find(e.value) {
				return true
			}
		}
		for _, it := range n.items {
			if find(it) {
				return true
			}
		}
		return false
	}
	find(r)
	return st
}

func (d *jsonDoc) insertions() ([]insertion, error) {
	var out []insertion
	var walk func(n *node)
	walk = func(n *node) {
		if len(n.addEntries) > 0 || len(n.addItems) > 0 {
			out = append(out, d.insertionFor(n))
		}
		for _, e := range n.entries {
			walk(e.value)
		}
		for _, c := range n.items {
			walk(c)
		}
	}
	walk(d.root)
	return out, nil
}

// insertionFor renders the additions to n. When n's elements sit on lines of their own, new ones
// go first, right after the opening bracket, each line ending in a comma: the diff then only adds
// lines, where appending would also change the old last line (it gains a comma). Jackson-style
// arrays ("[ {" … "} ]") get new elements at the end, which also only adds lines ("}, {" …).
func (d *jsonDoc) insertionFor(n *node) insertion {
	st := d.st
	var firstStart int
	count := len(n.entries) + len(n.items)
	if n.kind == kindMap && count > 0 {
		firstStart = n.entries[0].keyStart
	} else if count > 0 {
		firstStart = n.items[0].start
	}
	render := func(indent string) []string {
		var parts []string
		for _, e := range n.addEntries {
			k, _ := json.Marshal(e.key)
			parts = append(parts, string(k)+st.colon+st.render(e.v, indent))
		}
		for _, it := range n.addItems {
			parts = append(parts, st.render(it, indent))
		}
		return parts
	}
	switch {
	case count == 0 && st.compact:
		return insertion{off: n.start + 1, depth: n.depth, text: strings.Join(render(""), ",")}
	case count == 0 && n.kind == kindSeq && st.jackson:
		return insertion{off: n.start + 1, depth: n.depth, text: " " + strings.Join(render(d.lineIndent(n.start)), ", ") + " "}
	case count == 0:
		outer := d.lineIndent(n.start)
		indent := outer + st.unit
		text := st.nl + indent + strings.Join(render(indent), ","+st.nl+indent) + st.nl + outer
		return insertion{off: n.start + 1, depth: n.depth, text: text}
	case st.compact:
		return insertion{off: n.start + 1, depth: n.depth, text: strings.Join(render(""), ",") + ","}
	case d.firstOnLine(firstStart):
		indent := d.lineIndent(firstStart)
		text := st.nl + indent + strings.Join(render(indent), ","+st.nl+indent) + ","
		return insertion{off: n.start + 1, depth: n.depth, text: text}
	}
	// Elements follow the bracket on its line: append after the last one.
	var lastEnd int
	if n.kind == kindMap {
		lastEnd = n.entries[len(n.entries)-1].value.end
	} else {
		lastEnd = n.items[len(n.items)-1].end
	}
	indent := d.lineIndent(lastEnd - 1)
	return insertion{off: lastEnd, depth: n.depth, text: ", " + strings.Join(render(indent), ", ")}
}

// render writes v as JSON whose closing bracket sits at indent.
func (st jsonStyle) render(v *val, indent string) string {
	switch v.kind {
	case kindScalar:
		if v.raw {
			return v.s
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v.s)
		return strings.TrimSuffix(b.String(), "\n")
	case kindMap:
		if len(v.kvs) == 0 {
			return "{}"
		}
		parts := make([]string, len(v.kvs))
		inner := indent + st.unit
		for i, e := range v.kvs {
			k, _ := json.Marshal(e.key)
			parts[i] = string(k) + st.colon + st.render(e.v, inner)
		}
		if st.compact {
			return "{" + strings.Join(parts, ",") + "}"
		}
		return "{" + st.nl + inner + strings.Join(parts, ","+st.nl+inner) + st.nl + indent + "}"
	default:
		if len(v.items) == 0 {
			return "[]"
		}
		scalars := true
		for _, it := range v.items {
			scalars = scalars && it.kind == kindScalar
		}
		switch {
		case st.compact:
			parts := make([]string, len(v.items))
			for i, it := range v.items {
				parts[i] = st.render(it, indent)
			}
			return "[" + strings.Join(parts, ",") + "]"
		case st.jackson:
			parts := make([]string, len(v.items))
			for i, it := range v.items {
				parts[i] = st.render(it, indent)
			}
			return "[ " + strings.Join(parts, ", ") + " ]"
		case scalars && v.flow:
			parts := make([]string, len(v.items))
			for i, it := range v.items {
				parts[i] = st.render(it, indent)
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
		inner := indent + st.unit
		parts := make([]string, len(v.items))
		for i, it := range v.items {
			parts[i] = st.render(it, inner)
		}
		return "[" + st.nl + inner + strings.Join(parts, ","+st.nl+inner) + st.nl + indent + "]"
	}
}
