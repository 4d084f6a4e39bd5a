package annotate

import (
	"strings"

	"gopkg.in/yaml.v3"
)

// kind is the shape of a node or of a value to add.
type kind int

const (
	kindScalar kind = iota
	kindMap
	kindSeq
)

// node is one value of the parsed document, in a form shared by YAML and JSON. It remembers where
// it sits in the file so that additions can be spliced into the original bytes, and it collects
// the additions (addEntries, addItems) that the planner attaches to it.
type node struct {
	kind  kind
	value string // decoded scalar text
	null  bool   // an explicit or implied null scalar
	// fill marks a YAML key written with no value at all ("components:"): additions make it a
	// block mapping or sequence under the key, which sits on line fillLine at fillIndent.
	fill                 bool
	fillLine, fillIndent int
	entries              []*entry
	items                []*node
	line                 int // 1-based, for messages
	col                  int
	depth                int // nesting depth, to order insertions that land at the same offset
	// shared marks a node reached through a YAML alias, anchor or merge key: editing it would also
	// change every other place that uses the same anchor, so the planner never edits it.
	shared bool
	// flow marks a collection written inline: YAML flow style ({…} or […]), or JSON on one line
	// with its parent. Adding to it rewrites a line, so only necessary additions go there.
	flow bool

	// Format specifics: the yaml.v3 node it came from, or the JSON byte span [start, end).
	y          *yaml.Node
	start, end int

	addEntries []kv
	addItems   []*val
}

// entry is one key of a mapping.
type entry struct {
	key      string
	keyQuote byte // 0 plain, '\'' or '"', as written (YAML only)
	keyLine  int
	keyCol   int
	keyStart int // JSON: offset of the key's opening quote
	value    *node
}

func (n *node) get(key string) *node {
	if n == nil || n.kind != kindMap {
		return nil
	}
	for _, e := range n.entries {
		if e.key == key {
			return e.value
		}
	}
	return nil
}

// getFold is get with a case-insensitive key, for HTTP header names.
func (n *node) getFold(key string) *node {
	if n == nil || n.kind != kindMap {
		return nil
	}
	for _, e := range n.entries {
		if strings.EqualFold(e.key, key) {
			return e.value
		}
	}
	return nil
}

func (n *node) str(key string) string {
	c := n.get(key)
	if c == nil || c.kind != kindScalar {
		return ""
	}
	return c.value
}

func (n *node) isMap() bool { return n != nil && n.kind == kindMap }

// editable reports whether additions may be spliced into n.
func (n *node) editable() bool {
	return n != nil && !n.shared && (n.kind == kindMap || n.kind == kindSeq)
}

// val is a value the planner adds: a scalar, an ordered mapping or a sequence.
type val struct {
	kind  kind
	s     string
	raw   bool // a boolean or number: never quoted
	kvs   []kv
	items []*val
	flow  bool // render a sequence inline even in block YAML
}

// kv is one mapping entry to add.
type kv struct {
	key      string
	keyQuote byte // 0: decide from the text; 'p' plain; '\'' or '"'
	v        *val
}

func str(s string) *val { return &val{kind: kindScalar, s: s} }
func lit(s string) *val { return &val{kind: kindScalar, s: s, raw: true} }
func mapping(kvs ...kv) *val {
	return &val{kind: kindMap, kvs: kvs}
}
func seq(items ...*val) *val { return &val{kind: kindSeq, items: items} }
func ref(pointer string) *val {
	return mapping(kv{key: "$ref", v: str(pointer)})
}

// target is where an addition goes: a node of the document, or a value that is itself being added
// (a mapping created earlier in the same run).
type target struct {
	n *node
	v *val
}

func (t target) valid() bool { return t.n != nil || t.v != nil }

// pendingEntry finds key among the entries already planned for t.
func (t target) pendingEntry(key string) *val {
	var kvs []kv
	switch {
	case t.n != nil:
		kvs = t.n.addEntries
	case t.v != nil:
		kvs = t.v.kvs
	}
	for _, e := range kvs {
		if e.key == key {
			return e.v
		}
	}
	return nil
}

// has reports whether key exists in the document or is already planned.
func (t target) has(key string) bool {
	if t.n != nil && t.n.get(key) != nil {
		return true
	}
	return t.pendingEntry(key) != nil
}

// child returns the mapping under key, creating a planned empty mapping when key is absent. The
// result is invalid when key exists but cannot be edited (not a mapping, or shared).
func (t target) child(key string) target {
	if t.n != nil {
		if c := t.n.get(key); c != nil {
			if c.fill && !c.shared && c.kind == kindScalar {
				c.kind = kindMap
			}
			if c.kind != kindMap || !c.editable() {
				return target{}
			}
			return target{n: c}
		}
	}
	if v := t.pendingEntry(key); v != nil {
		return target{v: v}
	}
	v := mapping()
	t.add(kv{key: key, v: v})
	return target{v: v}
}

// childSeq is child for a sequence.
func (t target) childSeq(key string) target {
	if t.n != nil {
		if c := t.n.get(key); c != nil {
			if c.fill && !c.shared && c.kind == kindScalar {
				c.kind = kindSeq
			}
			if c.kind != kindSeq || !c.editable() {
				return target{}
			}
			return target{n: c}
		}
	}
	if v := t.pendingEntry(key); v != nil {
		return target{v: v}
	}
	v := seq()
	t.add(kv{key: key, v: v})
	return target{v: v}
}

func (t target) add(e kv) {
	if t.n != nil {
		t.n.addEntries = append(t.n.addEntries, e)
		return
	}
	t.v.kvs = append(t.v.kvs, e)
}

func (t target) appendItem(v *val) {
	if t.n != nil {
		t.n.addItems = append(t.n.addItems, v)
		return
	}
	t.v.items = append(t.v.items, v)
}
