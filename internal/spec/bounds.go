package spec

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds on what Load reads, so that a hostile or broken document is refused at once with an
// error saying why, rather than costing minutes or gigabytes: real OpenAPI documents are a few MiB
// (the largest public ones, around 10), nest a few dozen levels, and chain a few $refs.
const (
	// DefaultMaxBytes is LoadOpts.MaxBytes's default: 32 MiB.
	DefaultMaxBytes = 32 << 20
	// MaxDepth bounds how deeply mappings and sequences nest.
	MaxDepth = 1000
	// MaxRefChain bounds a chain of $refs whose target is itself a $ref.
	MaxRefChain = 100
)

// MaxBytesEnv names the environment variable that raises (or, negative, lifts) the size limit
// of LoadOpts whose MaxBytes is 0: a number of bytes.
const MaxBytesEnv = "IDEMGEN_MAX_SPEC_BYTES"

// maxBytes is o's size limit; negative is none.
func (o *LoadOpts) maxBytes() int64 {
	if o != nil && o.MaxBytes != 0 {
		return o.MaxBytes
	}
	if v, err := strconv.ParseInt(strings.TrimSpace(os.Getenv(MaxBytesEnv)), 10, 64); err == nil && v != 0 {
		return v
	}
	return DefaultMaxBytes
}

// MaxBytes is the size limit opts (nil: the defaults) puts on a document; negative is none.
func MaxBytes(opts *LoadOpts) int64 { return opts.maxBytes() }

// CheckBounds refuses a document that is too large, nests too deeply, or chains its $refs into
// a loop or past MaxRefChain, with an error that names the file, the place and what to do. Load
// and LoadData check it first; a caller that parses the document its own way before loading it
// (idemgen annotate) calls it before that.
func CheckBounds(path string, data []byte, opts *LoadOpts) error {
	_, err := checkBounds(path, data, opts)
	return err
}

// checkBounds is CheckBounds, returning the node tree it built: size and nesting are checked
// before any parser runs, the $ref chains on the tree before kin-openapi follows them.
func checkBounds(path string, data []byte, opts *LoadOpts) (*yaml.Node, error) {
	if limit := opts.maxBytes(); limit >= 0 && int64(len(data)) > limit {
		return nil, SizeError(path, int64(len(data)), limit)
	}
	if err := depthError(path, data); err != nil {
		return nil, err
	}
	tree, err := parseTree(data)
	if err != nil {
		return nil, syntaxError(path, data, err)
	}
	if err := refError(path, tree, opts); err != nil {
		return nil, err
	}
	return tree, nil
}

// SizeError refuses a document of size bytes over limit.
func SizeError(path string, size, limit int64) error {
	return fmt.Errorf("%s: the document is %s, over the limit of %s: a real OpenAPI document is a few MiB; "+
		"if this one is genuine, raise the limit: %s=<bytes> (-1: no limit)", path, mib(size), mib(limit), MaxBytesEnv)
}

func mib(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

// depthError finds the first place where data nests deeper than MaxDepth, reading it as YAML
// (JSON is YAML's flow style): flow collections ([ ] and { }) count by their brackets, block
// ones by their indentation. It is one pass over the bytes, with no parse: it runs before any
// parser, which would otherwise recurse (and allocate) once per level. Its reading of YAML is
// approximate (a bracket inside a plain scalar that does not open a collection is not counted,
// an apostrophe inside one does not open a quote); it only has to tell a document that nests a
// few dozen levels from one that nests a thousand.
func depthError(path string, data []byte) error {
	var (
		indents   []int // the block levels open, by their indentation
		flow      int   // flow collections open
		quote     byte  // the quote a string is open with, or 0
		prev      byte  = '\n'
		line            = 1
		lineStart       = true // at the first byte of a line, before its indentation is read
	)
	tooDeep := func() error {
		return fmt.Errorf("%s:%d: the document nests deeper than %d levels: a real OpenAPI document nests a few dozen; refusing it", path, line, MaxDepth)
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		if lineStart && quote == 0 && flow == 0 {
			// A line's start, in block context: its indentation closes the deeper levels and
			// opens one; each "- " of a compact sequence opens one more.
			j := i
			for j < len(data) && data[j] == ' ' {
				j++
			}
			if j < len(data) && data[j] != '\n' && data[j] != '\r' && data[j] != '#' {
				for len(indents) > 0 && indents[len(indents)-1] >= j-i {
					indents = indents[:len(indents)-1]
				}
				indents = append(indents, j-i)
				for j+1 < len(data) && data[j] == '-' && data[j+1] == ' ' {
					j += 2
					for j < len(data) && data[j] == ' ' {
						j++
					}
					indents = append(indents, j-i)
				}
				if len(indents) > MaxDepth {
					return tooDeep()
				}
			}
		}
		lineStart = false
		switch {
		case c == '\n':
			line++
			lineStart = true
			if quote == 0 {
				prev = '\n'
			}
			continue
		case quote != 0:
			switch {
			case quote == '"' && c == '\\':
				i++ // the escaped byte
			case c == quote && quote == '\'' && i+1 < len(data) && data[i+1] == '\'':
				i++ // '' is a quote inside a single-quoted string
			case c == quote:
				quote = 0
			}
		case c == ' ' || c == '\t' || c == '\r':
			continue // prev stays the last byte that was not a space
		case c == '#' && (i == 0 || data[i-1] == ' ' || data[i-1] == '\t' || data[i-1] == '\n'):
			for i+1 < len(data) && data[i+1] != '\n' {
				i++
			}
			continue
		case valueStart(prev) && (c == '"' || c == '\''):
			quote = c
		case (c == '[' || c == '{') && (flow > 0 || valueStart(prev)):
			flow++
			if len(indents)+flow > MaxDepth {
				return tooDeep()
			}
		case c == '[' || c == '{':
			prev = 'a' // inside a plain scalar: what follows it starts no value
			continue
		case (c == ']' || c == '}') && flow > 0:
			flow--
		}
		prev = c
	}
	return nil
}

// valueStart says a value may begin after prev (the last byte that was not a space): at a line's
// start, after a key's colon, a sequence's dash, or inside a flow collection.
func valueStart(prev byte) bool {
	switch prev {
	case '\n', ':', '-', ',', '[', '{', '?':
		return true
	}
	return false
}

// refError checks the document's $refs on its node tree, and on the trees of the local files
// they name (read within the same bounds, see ReadFile): a chain of $refs that comes back to where
// it started, whatever its spelling (#/…, ./spec.yaml#/…, through another file), is an error that
// names the file, the place of the first $ref and the chain (kin-openapi would leave the value
// empty, or oapi-codegen panic on it later); so is one longer than MaxRefChain (kin-openapi's time
// grows with the square of a chain), and a schema that includes itself through allOf (oapi-codegen
// would generate type A = B and type B = A). A $ref to another host, or to a file or place that
// does not exist, is left to kin-openapi, which says so.
func refError(path string, root *yaml.Node, opts *LoadOpts) error {
	docs := newRefDocs(path, root, opts.maxBytes())
	// length holds, for each $ref node followed so far, the length of the chain it starts
	// (0 while it is being followed: meeting it again is a loop).
	length := map[*yaml.Node]int{}
	var err error
	walkNodes(root, func(n *yaml.Node) bool {
		if _, ok := length[n]; ok || refOf(n) == "" {
			return true
		}
		err = docs.followRefs(docs.top.at(n), length)
		return err == nil
	})
	if err != nil {
		return err
	}
	return docs.allOfLoops(length)
}

// refDoc is a document a $ref chain passes through: the spec, or a local file one of its $refs
// names.
type refDoc struct {
	name string // as messages name it: the spec's path, or a $ref's file relative to the spec's
	abs  string
	root *yaml.Node
}

// refAt is a node and the document it is in, which its relative $refs are read against.
type refAt struct {
	doc *refDoc
	n   *yaml.Node
}

func (d *refDoc) at(n *yaml.Node) refAt { return refAt{d, n} }

func (a refAt) pos() string { return fmt.Sprintf("%s:%d:%d", a.doc.name, a.n.Line, a.n.Column) }

type refDocs struct {
	limit int64
	top   *refDoc
	byAbs map[string]*refDoc
}

func newRefDocs(path string, root *yaml.Node, limit int64) *refDocs {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	top := &refDoc{name: path, abs: abs, root: root}
	return &refDocs{limit: limit, top: top, byAbs: map[string]*refDoc{abs: top}}
}

// target is where the $ref of a leads: a node of a's document or of a local file, or a zero
// refAt for a $ref left to kin-openapi (another host, a file or place that does not exist, a file
// that does not parse). A file that must not be read (a device, a FIFO, over the size limit, too
// deeply nested) is an error placed at the $ref.
func (docs *refDocs) target(a refAt) (refAt, error) {
	ref := refOf(a.n)
	file, frag, _ := strings.Cut(ref, "#")
	d := a.doc
	if file != "" {
		u, err := url.Parse(file)
		if err != nil || u.Scheme != "" || u.Host != "" {
			return refAt{}, nil
		}
		rel := filepath.FromSlash(u.Path)
		abs, name := rel, rel
		if !filepath.IsAbs(rel) {
			abs = filepath.Join(filepath.Dir(d.abs), rel)
			name = filepath.Join(filepath.Dir(d.name), rel)
		}
		abs = filepath.Clean(abs)
		if d = docs.byAbs[abs]; d == nil {
			data, err := ReadFile(name, docs.limit)
			if err == nil {
				err = depthError(name, data)
			}
			var re *ReadError
			switch {
			case errors.As(err, &re):
				return refAt{}, nil // kin-openapi says it cannot be read
			case err != nil:
				return refAt{}, fmt.Errorf("%s: $ref %q: %w", a.pos(), ref, err)
			}
			tree, err := parseTree(data)
			if err != nil {
				return refAt{}, nil
			}
			d = &refDoc{name: name, abs: abs, root: tree}
			docs.byAbs[abs] = d
		}
	}
	n := pointer(d.root, "#"+frag)
	if n == nil {
		return refAt{}, nil
	}
	return d.at(n), nil
}

// hops names the $refs of a chain as written, each with where it is written once the chain
// names a file.
func hops(chain []refAt) []string {
	crossed := slices.ContainsFunc(chain, func(a refAt) bool { return !strings.HasPrefix(refOf(a.n), "#") })
	out := make([]string, len(chain))
	for i, a := range chain {
		out[i] = refOf(a.n)
		if crossed {
			out[i] += " (" + a.pos() + ")"
		}
	}
	return out
}

// followRefs follows the chain of $refs that starts at a, recording the length of the chain
// from each of its nodes in length.
func (docs *refDocs) followRefs(a refAt, length map[*yaml.Node]int) error {
	var chain []refAt
	var next refAt
	for cur := a; cur.n != nil; {
		if l, seen := length[cur.n]; seen {
			if l == 0 { // on the chain being followed: a loop
				return fmt.Errorf("%s: $ref loop: %s → %s again: each $ref leads to the next and the last back to the first, so none has a value; "+
					"point one of them at a real definition", cur.pos(), strings.Join(hops(chain), " → "), refOf(cur.n))
			}
			break
		}
		length[cur.n] = 0
		chain = append(chain, cur)
		if len(chain) > MaxRefChain {
			h := hops(chain)
			return fmt.Errorf("%s: a chain of more than %d $refs, each to another $ref (%s → %s → … → %s): "+
				"a real document chains a few; point the $refs at their definitions", a.pos(), MaxRefChain, h[0], h[1], h[len(h)-1])
		}
		var err error
		if next, err = docs.target(cur); err != nil {
			return err
		}
		if next.n == nil || refOf(next.n) == "" {
			break
		}
		cur = next
	}
	// The chain's end is known now: record each node's distance to it, from the end back.
	end := 0
	if next.n != nil {
		end = length[next.n] // a chain followed before, or 0 for a value that is no $ref
	}
	for i := len(chain) - 1; i >= 0; i-- {
		end++
		length[chain[i].n] = end
		if end > MaxRefChain {
			return fmt.Errorf("%s: a chain of more than %d $refs, each to another $ref (from %s): "+
				"a real document chains a few; point the $refs at their definitions", chain[i].pos(), MaxRefChain, refOf(chain[i].n))
		}
	}
	return nil
}

// deref is the value a's chain of $refs ends at (a itself when it is no $ref), or a zero refAt
// when the chain leads out of what is checked here.
func (docs *refDocs) deref(a refAt, length map[*yaml.Node]int) (refAt, error) {
	for range MaxRefChain + 1 {
		if a.n == nil || refOf(a.n) == "" {
			return a, nil
		}
		if _, ok := length[a.n]; !ok {
			if err := docs.followRefs(a, length); err != nil {
				return refAt{}, err
			}
		}
		next, err := docs.target(a)
		if err != nil {
			return refAt{}, err
		}
		a = next
	}
	return refAt{}, nil
}

// allOfLoops refuses a schema that includes itself through allOf, directly or through other
// schemas, in the spec or the files it $refs: each would have to hold all of the next.
func (docs *refDocs) allOfLoops(length map[*yaml.Node]int) error {
	const (
		open = 1 // being visited: its allOf items are on the path
		done = 2
	)
	state := map[*yaml.Node]int{}
	var nodes []*yaml.Node // the schemas on the path: nodes[i] includes nodes[i+1] through items[i]
	var items []refAt      // the allOf items on the path
	name := func(it refAt, i int) string {
		if r := refOf(it.n); r != "" {
			return r
		}
		return fmt.Sprintf("an inline allOf[%d] schema at %s", i, it.pos())
	}
	var index []int
	var visit func(a refAt) error
	visit = func(a refAt) error {
		switch state[a.n] {
		case done:
			return nil
		case open:
			k := slices.Index(nodes, a.n)
			names := []string{name(items[len(items)-1], index[len(index)-1])}
			for j := k; j < len(items); j++ {
				names = append(names, name(items[j], index[j]))
			}
			return fmt.Errorf("%s: allOf loop: %s: each schema includes the next through allOf and the last the first, so none has an end "+
				"(oapi-codegen would generate types that are aliases of each other and do not compile); break the loop",
				items[k].pos(), strings.Join(names, " → "))
		}
		state[a.n] = open
		nodes = append(nodes, a.n)
		if _, all := lookup(a.n, "allOf"); all != nil && all.Kind == yaml.SequenceNode {
			for i, it := range all.Content {
				it = resolve(it)
				item := a.doc.at(it)
				t, err := docs.deref(item, length)
				if err != nil {
					return err
				}
				if t.n == nil || t.n.Kind != yaml.MappingNode {
					continue
				}
				items, index = append(items, item), append(index, i)
				if err := visit(t); err != nil {
					return err
				}
				items, index = items[:len(items)-1], index[:len(index)-1]
			}
		}
		nodes = nodes[:len(nodes)-1]
		state[a.n] = done
		return nil
	}
	var err error
	walkNodes(docs.top.root, func(n *yaml.Node) bool {
		if n.Kind == yaml.MappingNode && state[n] == 0 {
			if _, all := lookup(n, "allOf"); all != nil {
				err = visit(docs.top.at(n))
			}
		}
		return err == nil
	})
	return err
}

// refOf is n's $ref ("#/components/…", "common.yaml#/…"), or "" when n is not a mapping with
// one.
func refOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "$ref" && v.Kind == yaml.ScalarNode && v.Value != "" {
			return v.Value
		}
	}
	return ""
}

// pointer resolves a local JSON pointer ("#/a/b~1c") in root, or nil.
func pointer(root *yaml.Node, ref string) *yaml.Node {
	frag := strings.TrimPrefix(ref, "#")
	if u, err := url.PathUnescape(frag); err == nil {
		frag = u
	}
	n := root
	if frag == "" || frag == "/" {
		return resolve(n) // the whole document
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		n = resolve(n)
		switch {
		case n == nil:
			return nil
		case n.Kind == yaml.MappingNode:
			_, n = lookup(n, tok)
		case n.Kind == yaml.SequenceNode:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.Content) {
				return nil
			}
			n = n.Content[i]
		default:
			return nil
		}
	}
	return resolve(n)
}

// walkNodes calls fn on every node under root, depth first, until fn returns false. Aliases are
// not followed (their anchors are walked where they are defined), so a tree whose aliases form
// a cycle is walked once.
func walkNodes(root *yaml.Node, fn func(*yaml.Node) bool) {
	stack := []*yaml.Node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil || n.Kind == yaml.AliasNode {
			continue
		}
		if !fn(n) {
			return
		}
		stack = append(stack, n.Content...)
	}
}
