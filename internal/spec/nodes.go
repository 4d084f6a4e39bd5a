package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
)

// parseTree parses data (YAML or JSON) into a node tree whose nodes carry 1-based line and column.
// kin-openapi's values do not keep positions for extensions, so every diagnostic position comes
// from this tree. yaml.v3 reads nearly all JSON; for the JSON it refuses (tab indentation inside a
// YAML-looking block, for instance) a small token walker builds the same kind of tree. A JSON
// document is read by jsonNodes, which builds the tree those two would, in a fraction of the time.
func parseTree(data []byte) (*yaml.Node, error) {
	if root, ok := jsonNodes(data); ok {
		return root, nil
	}
	root, _, err := slowTree(data)
	return root, err
}

// slowTree is parseTree without jsonNodes; it also says which of the two parsers built the tree.
func slowTree(data []byte) (root *yaml.Node, by string, err error) {
	var doc yaml.Node
	yerr := yaml.Unmarshal(data, &doc)
	if yerr == nil {
		if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			return doc.Content[0], "yaml.v3", nil
		}
		return &yaml.Node{Kind: yaml.MappingNode, Line: 1, Column: 1}, "yaml.v3", nil
	}
	if root, jerr := jsonTree(data); jerr == nil {
		return root, "jsonTree", nil
	}
	return nil, "", yerr
}

// resolve follows YAML aliases so that anchors (&defaults / *defaults) are read like inline values.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// lookup returns the key and value nodes of name in mapping m (nil, nil when absent). Merge keys
// (<<: *anchor) are searched after the mapping's own keys, as YAML specifies.
func lookup(m *yaml.Node, name string) (key, val *yaml.Node) {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == name && m.Content[i].Tag != "!!merge" {
			return m.Content[i], resolve(m.Content[i+1])
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Tag == "!!merge" {
			if k, v := lookup(m.Content[i+1], name); k != nil {
				return k, v
			}
		}
	}
	return nil, nil
}

// pairs returns the key/value pairs of a mapping in document order, aliases resolved.
func pairs(m *yaml.Node) [][2]*yaml.Node {
	m = resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Tag == "!!merge" {
			out = append(out, pairs(m.Content[i+1])...)
			continue
		}
		out = append(out, [2]*yaml.Node{m.Content[i], resolve(m.Content[i+1])})
	}
	return out
}

func posOf(file string, n *yaml.Node) model.Position {
	if n == nil {
		return model.Position{File: file}
	}
	return model.Position{File: file, Line: n.Line, Col: n.Column}
}

// show renders a node for a message: strings quoted, other scalars as written, collections by kind.
func show(n *yaml.Node) string {
	n = resolve(n)
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "null"
	case n.Tag == "!!str":
		return strconv.Quote(n.Value)
	default:
		return n.Value
	}
}

// fromValue builds a node tree from a decoded value (kin-openapi's extension values), every node
// placed at pos. It is used for operations that live in another file through a path item $ref,
// where this file's tree has no nodes for them.
func fromValue(v any, pos *yaml.Node) *yaml.Node {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	var place func(*yaml.Node)
	place = func(x *yaml.Node) {
		x.Line, x.Column = pos.Line, pos.Column
		x.Style = 0
		for _, c := range x.Content {
			place(c)
		}
	}
	place(&n)
	return &n
}

// jsonTree builds a yaml.Node tree from JSON with token positions, for JSON that yaml.v3 rejects.
func jsonTree(data []byte) (*yaml.Node, error) {
	lines := lineStarts(data)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	// start finds where the token that ends at dec.InputOffset() began: skip the whitespace and the
	// structural ',' and ':' that precede it from the previous offset.
	prev := int64(0)
	next := func() (json.Token, model.Position, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, model.Position{}, err
		}
		s := prev
		for s < int64(len(data)) {
			c := data[s]
			if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ':' {
				s++
				continue
			}
			break
		}
		prev = dec.InputOffset()
		line, col := lineCol(data, lines, s)
		return tok, model.Position{Line: line, Col: col}, nil
	}
	var build func(tok json.Token, p model.Position) (*yaml.Node, error)
	build = func(tok json.Token, p model.Position) (*yaml.Node, error) {
		n := &yaml.Node{Line: p.Line, Column: p.Col}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				n.Kind, n.Tag = yaml.MappingNode, "!!map"
				for {
					ktok, kp, err := next()
					if err != nil {
						return nil, err
					}
					if d, ok := ktok.(json.Delim); ok && d == '}' {
						return n, nil
					}
					k, ok := ktok.(string)
					if !ok {
						return nil, fmt.Errorf("line %d: object key is not a string", kp.Line)
					}
					vtok, vp, err := next()
					if err != nil {
						return nil, err
					}
					v, err := build(vtok, vp)
					if err != nil {
						return nil, err
					}
					n.Content = append(n.Content,
						&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k, Line: kp.Line, Column: kp.Col}, v)
				}
			case '[':
				n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
				for {
					etok, ep, err := next()
					if err != nil {
						return nil, err
					}
					if d, ok := etok.(json.Delim); ok && d == ']' {
						return n, nil
					}
					e, err := build(etok, ep)
					if err != nil {
						return nil, err
					}
					n.Content = append(n.Content, e)
				}
			default:
				return nil, fmt.Errorf("line %d: unexpected %q", p.Line, t)
			}
		case string:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!str", t
		case json.Number:
			n.Kind, n.Value = yaml.ScalarNode, t.String()
			n.Tag = "!!float"
			if _, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
				n.Tag = "!!int"
			}
		case bool:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", strconv.FormatBool(t)
		case nil:
			n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
		}
		return n, nil
	}
	tok, p, err := next()
	if err != nil {
		return nil, err
	}
	root, err := build(tok, p)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level JSON value")
	}
	return root, nil
}

func lineStarts(data []byte) []int64 {
	starts := []int64{0}
	for i, c := range data {
		if c == '\n' {
			starts = append(starts, int64(i+1))
		}
	}
	return starts
}

// lineCol converts a byte offset to a 1-based line and a 1-based column counted in characters,
// as yaml.v3 counts them (and as the SARIF output declares with columnKind unicodeCodePoints).
func lineCol(data []byte, starts []int64, off int64) (int, int) {
	lo, hi := 0, len(starts)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if starts[mid] <= off {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo + 1, utf8.RuneCount(data[starts[lo]:off]) + 1
}
