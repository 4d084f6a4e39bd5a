package annotate

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// yamlDoc is a YAML document: yaml.v3 finds the structure and the positions; the additions are
// spliced into the original bytes, because re-encoding the node tree would lose comments,
// quoting, blank lines and indentation.
type yamlDoc struct {
	data  []byte
	lines []int // byte offset of the start of each line
	root  *node
	st    yamlStyle
	// aliased holds the conversion of every node an alias points at: an alias is read where it
	// is used but converted once, so a document of nested aliases cannot blow up exponentially.
	aliased map[*yaml.Node]*node
}

// yamlStyle is what the document's own formatting says new text should look like.
type yamlStyle struct {
	unit        int  // indentation step
	seqIndent   bool // "key:\n  - item" rather than "key:\n- item"
	quote       byte // quote for strings that need one: '\'' or '"'
	statusQuote byte // how response status codes are written: 'p', '\'' or '"'
	nl          string
}

func parseYAML(data []byte) (*yamlDoc, error) {
	var y yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&y); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	d := &yamlDoc{data: data, lines: lineStarts(data), aliased: map[*yaml.Node]*node{}}
	var err error
	d.root, err = d.conv(&y, 0, false)
	if err != nil {
		return nil, err
	}
	d.st = detectYAMLStyle(&y, data)
	return d, nil
}

func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// line returns line l (1-based) without its line ending.
func (d *yamlDoc) line(l int) string {
	start := d.lines[l-1]
	end := len(d.data)
	if l < len(d.lines) {
		end = d.lines[l]
	}
	return strings.TrimRight(string(d.data[start:end]), "\r\n")
}

// offset converts yaml.v3's 1-based line and (character) column to a byte offset.
func (d *yamlDoc) offset(line, col int) int {
	off := d.lines[line-1]
	for i := 1; i < col && off < len(d.data); i++ {
		_, size := utf8.DecodeRune(d.data[off:])
		off += size
	}
	return off
}

const maxDepth = 200

func (d *yamlDoc) conv(y *yaml.Node, depth int, shared bool) (*node, error) {
	if depth > maxDepth {
		return nil, errors.New("document nests too deeply")
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil, errors.New("the document is empty")
		}
		return d.conv(y.Content[0], depth, shared)
	case yaml.AliasNode:
		if n, ok := d.aliased[y.Alias]; ok {
			return n, nil
		}
		n, err := d.conv(y.Alias, depth, true)
		if err == nil {
			d.aliased[y.Alias] = n
		}
		return n, err
	}
	if y.Anchor != "" {
		shared = true
	}
	n := &node{line: y.Line, col: y.Column, depth: depth, shared: shared, y: y, flow: y.Style&yaml.FlowStyle != 0}
	switch y.Kind {
	case yaml.ScalarNode:
		n.kind = kindScalar
		n.value = y.Value
		n.null = y.Tag == "!!null"
	case yaml.SequenceNode:
		n.kind = kindSeq
		for _, c := range y.Content {
			cn, err := d.conv(c, depth+1, shared)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, cn)
		}
	case yaml.MappingNode:
		n.kind = kindMap
		var merges []*yaml.Node
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Tag == "!!merge" {
				merges = append(merges, v)
				continue
			}
			cn, err := d.conv(v, depth+1, shared)
			if err != nil {
				return nil, err
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" && v.Value == "" && y.Style&yaml.FlowStyle == 0 {
				cn.fill, cn.fillLine, cn.fillIndent = true, k.Line, k.Column-1
			}
			n.entries = append(n.entries, &entry{key: k.Value, keyQuote: quoteOf(k.Style), keyLine: k.Line, keyCol: k.Column, value: cn})
		}
		// Keys merged in with "<<" count as present, but belong to another place of the file.
		for _, m := range merges {
			srcs := []*yaml.Node{m}
			if m.Kind == yaml.SequenceNode {
				srcs = m.Content
			}
			for _, src := range srcs {
				mn, err := d.conv(src, depth, true)
				if err != nil {
					return nil, err
				}
				for _, e := range mn.entries {
					if n.get(e.key) == nil {
						n.entries = append(n.entries, e)
					}
				}
			}
		}
	}
	return n, nil
}

func quoteOf(s yaml.Style) byte {
	switch {
	case s&yaml.SingleQuotedStyle != 0:
		return '\''
	case s&yaml.DoubleQuotedStyle != 0:
		return '"'
	}
	return 0
}

// detectYAMLStyle takes the indentation step, the sequence indentation and the quoting that the
// document uses most, so that added text looks like the text around it.
func detectYAMLStyle(root *yaml.Node, data []byte) yamlStyle {
	units := map[int]int{}
	seqIn, seqOut := 0, 0
	quotes := map[byte]int{}
	status := map[byte]int{}
	var walk func(y *yaml.Node, parentKey string)
	walk = func(y *yaml.Node, parentKey string) {
		if y.Kind == yaml.MappingNode && y.Style&yaml.FlowStyle == 0 {
			for i := 0; i+1 < len(y.Content); i += 2 {
				k, v := y.Content[i], y.Content[i+1]
				switch {
				case v.Kind == yaml.MappingNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 && v.Content[0].Line > k.Line:
					units[v.Content[0].Column-k.Column]++
				case v.Kind == yaml.SequenceNode && v.Style&yaml.FlowStyle == 0 && len(v.Content) > 0 && v.Line > k.Line:
					if v.Column > k.Column {
						seqIn++
					} else {
						seqOut++
					}
				}
				if k.Value == "$ref" && v.Kind == yaml.ScalarNode {
					if q := quoteOf(v.Style); q != 0 {
						quotes[q]++
					}
				}
				if parentKey == "responses" && isStatusKey(k.Value) {
					q := quoteOf(k.Style)
					if q == 0 {
						q = 'p'
					}
					status[q]++
				}
				walk(v, k.Value)
			}
			return
		}
		for _, c := range y.Content {
			walk(c, "")
		}
	}
	walk(root, "")
	st := yamlStyle{unit: 2, seqIndent: seqIn >= seqOut, quote: '\'', nl: "\n"}
	if best := mostCommon(units); best > 0 && best <= 8 {
		st.unit = best
	}
	if quotes['"'] > quotes['\''] {
		st.quote = '"'
	}
	st.statusQuote = st.quote
	if q := mostCommonByte(status); q != 0 {
		st.statusQuote = q
	}
	if i := bytes.IndexByte(data, '\n'); i > 0 && data[i-1] == '\r' {
		st.nl = "\r\n"
	}
	return st
}

func mostCommon(m map[int]int) int {
	best, n := 0, 0
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		if m[k] > n {
			best, n = k, m[k]
		}
	}
	return best
}

func mostCommonByte(m map[byte]int) byte {
	var best byte
	n := 0
	for _, k := range []byte{'p', '\'', '"'} {
		if m[k] > n {
			best, n = k, m[k]
		}
	}
	return best
}

func isStatusKey(s string) bool {
	if len(s) != 3 {
		return false
	}
	if s[1] == 'X' && s[2] == 'X' {
		return s[0] >= '1' && s[0] <= '5'
	}
	_, err := strconv.Atoi(s)
	return err == nil && s[0] >= '1' && s[0] <= '5'
}

// insertion is text to splice in at an offset of the original bytes.
type insertion struct {
	off   int
	depth int
	text  string
}

// insertions renders the additions planned on every node.
func (d *yamlDoc) insertions() ([]insertion, error) {
	var out []insertion
	var walk func(n *node) error
	walk = func(n *node) error {
		if len(n.addEntries) > 0 || len(n.addItems) > 0 {
			ins, err := d.insertionFor(n)
			if err != nil {
				return err
			}
			out = append(out, ins)
		}
		for _, e := range n.entries {
			if err := walk(e.value); err != nil {
				return err
			}
		}
		for _, c := range n.items {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.root); err != nil {
		return nil, err
	}
	return out, nil
}

func (d *yamlDoc) insertionFor(n *node) (insertion, error) {
	if n.flow {
		return d.flowInsertion(n)
	}
	if n.fill {
		return d.fillInsertion(n), nil
	}
	y := n.y
	if len(y.Content) == 0 {
		return insertion{}, fmt.Errorf("line %d: cannot add to an empty block collection", n.line)
	}
	var b strings.Builder
	var off int
	switch n.kind {
	case kindMap:
		firstKey := y.Content[0]
		indent := firstKey.Column - 1
		lastKey, lastVal := y.Content[len(y.Content)-2], y.Content[len(y.Content)-1]
		off = d.endOfBlock(lastKey.Line, indent, true, d.keepsTrailing(lastVal))
		d.st.blockEntries(&b, n.addEntries, indent)
	case kindSeq:
		indent := y.Column - 1
		last := y.Content[len(y.Content)-1]
		off = d.endOfBlock(last.Line, indent, false, d.keepsTrailing(last))
		d.st.blockItems(&b, n.addItems, indent)
	}
	text := b.String()
	if off == len(d.data) && len(d.data) > 0 && d.data[len(d.data)-1] != '\n' {
		// Keep a file that ends without a newline that way: the added lines go before the end.
		text = d.st.nl + strings.TrimSuffix(text, d.st.nl)
	}
	return insertion{off: off, depth: n.depth, text: text}, nil
}

// fillInsertion writes the first entries or items under a key that had no value.
func (d *yamlDoc) fillInsertion(n *node) insertion {
	var b strings.Builder
	if n.kind == kindMap {
		d.st.blockEntries(&b, n.addEntries, n.fillIndent+d.st.unit)
	} else {
		indent := n.fillIndent
		if d.st.seqIndent {
			indent += d.st.unit
		}
		d.st.blockItems(&b, n.addItems, indent)
	}
	text := b.String()
	off := len(d.data)
	if n.fillLine < len(d.lines) {
		off = d.lines[n.fillLine]
	}
	if off == len(d.data) && len(d.data) > 0 && d.data[len(d.data)-1] != '\n' {
		text = d.st.nl + strings.TrimSuffix(text, d.st.nl)
	}
	return insertion{off: off, depth: n.depth, text: text}
}

// keepsTrailing reports a block scalar with the keep indicator (|+ or >+), whose trailing blank
// lines are part of its value: additions go after them.
func (d *yamlDoc) keepsTrailing(y *yaml.Node) bool {
	if y.Kind != yaml.ScalarNode || y.Style&(yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		return false
	}
	rest := string(d.data[d.offset(y.Line, y.Column):])
	if i := strings.IndexAny(rest, "\r\n"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.Index(rest, "#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "+")
}

// endOfBlock returns the offset just after the last line of a block collection whose entries are
// indented by indent and whose last entry starts on line from. Everything indented deeper belongs
// to it (nested values, block scalars, continuation lines); comments and blank lines at or left of
// indent do not end it, a line of content there does. In a mapping, "- " at the same indentation
// is a compact sequence of its last key.
func (d *yamlDoc) endOfBlock(from, indent int, isMap, keep bool) int {
	last := from
	for l := from + 1; l <= len(d.lines); l++ {
		if l == len(d.lines) && d.lines[l-1] == len(d.data) {
			break // the empty "line" after a final newline
		}
		text := d.line(l)
		trimmed := strings.TrimLeft(text, " ")
		if strings.TrimSpace(trimmed) == "" {
			if keep {
				last = l
			}
			continue
		}
		ind := len(text) - len(trimmed)
		if ind == 0 && (trimmed == "---" || strings.HasPrefix(trimmed, "--- ") || trimmed == "...") {
			break
		}
		if ind > indent {
			last = l
			continue
		}
		if trimmed[0] == '#' {
			continue
		}
		if isMap && ind == indent && (trimmed == "-" || strings.HasPrefix(trimmed, "- ")) {
			last = l
			continue
		}
		break
	}
	if last < len(d.lines) {
		return d.lines[last]
	}
	return len(d.data)
}

// flowInsertion adds inside a flow collection, just before its closing bracket.
func (d *yamlDoc) flowInsertion(n *node) (insertion, error) {
	open := d.offset(n.y.Line, n.y.Column)
	for open < len(d.data) && d.data[open] != '{' && d.data[open] != '[' {
		open++
	}
	closeAt, err := matchFlow(d.data, open)
	if err != nil {
		return insertion{}, fmt.Errorf("line %d: %w", n.line, err)
	}
	p := closeAt
	for p > open+1 && isSpace(d.data[p-1]) {
		p--
	}
	var parts []string
	for _, e := range n.addEntries {
		parts = append(parts, d.st.key(e)+": "+d.st.flow(e.v))
	}
	for _, it := range n.addItems {
		parts = append(parts, d.st.flow(it))
	}
	text := strings.Join(parts, ", ")
	if p > open+1 {
		text = ", " + text
	}
	return insertion{off: p, depth: n.depth, text: text}, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// matchFlow returns the offset of the bracket closing the flow collection opened at open. Plain
// scalars cannot hold brackets or commas in flow context, so only quotes and comments need care.
func matchFlow(data []byte, open int) (int, error) {
	depth := 0
	for i := open; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i, nil
			}
		case '\'':
			for i++; i < len(data); i++ {
				if data[i] == '\'' {
					if i+1 < len(data) && data[i+1] == '\'' {
						i++
						continue
					}
					break
				}
			}
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '#':
			if i > 0 && isSpace(data[i-1]) {
				for i < len(data) && data[i] != '\n' {
					i++
				}
			}
		}
	}
	return 0, errors.New("flow collection is not closed")
}

// plainSafe matches strings that read back as the same string when written without quotes, in
// block and flow context alike.
var plainSafe = regexp.MustCompile(`^[A-Za-z0-9_/$][A-Za-z0-9_ ./()+\-]*[A-Za-z0-9_./()+\-]$|^[A-Za-z_]$`)

var yamlReserved = map[string]bool{
	"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true, "y": true, "n": true,
	"null": true, "~": true,
}

func (st yamlStyle) scalar(v *val) string {
	if v.raw {
		return v.s
	}
	if plainSafe.MatchString(v.s) && !yamlReserved[strings.ToLower(v.s)] && !looksNumeric(v.s) {
		return v.s
	}
	return st.quoted(v.s, st.quote)
}

func (st yamlStyle) quoted(s string, q byte) string {
	if q == '"' || strings.ContainsAny(s, "\n\t\\") {
		return strconv.Quote(s)
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

func (st yamlStyle) key(e kv) string {
	switch e.keyQuote {
	case 'p':
		return e.key
	case '\'', '"':
		return st.quoted(e.key, e.keyQuote)
	}
	if isStatusKey(e.key) {
		return st.key(kv{key: e.key, keyQuote: st.statusQuote})
	}
	return st.scalar(str(e.key))
}

func (st yamlStyle) flow(v *val) string {
	switch v.kind {
	case kindMap:
		parts := make([]string, len(v.kvs))
		for i, e := range v.kvs {
			parts[i] = st.key(e) + ": " + st.flow(e.v)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case kindSeq:
		parts := make([]string, len(v.items))
		for i, it := range v.items {
			parts[i] = st.flow(it)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return st.scalar(v)
}

func (st yamlStyle) blockEntries(b *strings.Builder, kvs []kv, indent int) {
	for _, e := range kvs {
		b.WriteString(strings.Repeat(" ", indent))
		st.entryBody(b, e, indent)
	}
}

func (st yamlStyle) entryBody(b *strings.Builder, e kv, indent int) {
	b.WriteString(st.key(e))
	b.WriteString(":")
	v := e.v
	switch {
	case v.kind == kindScalar:
		b.WriteString(" " + st.scalar(v) + st.nl)
	case v.flow || (v.kind == kindMap && len(v.kvs) == 0) || (v.kind == kindSeq && len(v.items) == 0):
		b.WriteString(" " + st.flow(v) + st.nl)
	case v.kind == kindMap:
		b.WriteString(st.nl)
		st.blockEntries(b, v.kvs, indent+st.unit)
	default:
		b.WriteString(st.nl)
		in := indent
		if st.seqIndent {
			in += st.unit
		}
		st.blockItems(b, v.items, in)
	}
}

func (st yamlStyle) blockItems(b *strings.Builder, items []*val, indent int) {
	for _, it := range items {
		b.WriteString(strings.Repeat(" ", indent) + "-")
		switch {
		case it.kind == kindMap && len(it.kvs) > 0 && !it.flow:
			b.WriteString(" ")
			st.entryBody(b, it.kvs[0], indent+2)
			st.blockEntries(b, it.kvs[1:], indent+2)
		case it.kind == kindSeq && len(it.items) > 0 && !it.flow:
			b.WriteString(st.nl)
			st.blockItems(b, it.items, indent+2)
		default:
			b.WriteString(" " + st.flow(it) + st.nl)
		}
	}
}

// looksNumeric reports strings a YAML parser would read as a number.
func looksNumeric(s string) bool {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return true
	}
	_, err := strconv.ParseInt(s, 0, 64)
	return err == nil
}
