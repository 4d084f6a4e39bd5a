package spec

import (
	"fmt"
	"net/url"
	"os"
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
	if err := refError(path, tree); err != nil {
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

// refError checks the document's local $refs on its node tree: a chain of $refs that comes back
// to where it started (kin-openapi would leave the value empty, and code generation fail on it
// later), or one longer than MaxRefChain (kin-openapi's time grows with the square of a chain), is
// an error that names the file, the place of the first $ref and the chain. A $ref to another
// file, or to a place the document lacks, is left to kin-openapi.
func refError(path string, root *yaml.Node) error {
	// length holds, for each $ref node followed so far, the length of the chain it starts
	// (0 while it is being followed: meeting it again is a loop).
	length := map[*yaml.Node]int{}
	var err error
	walkNodes(root, func(n *yaml.Node) bool {
		if _, ok := length[n]; ok || refOf(n) == "" {
			return true
		}
		err = followRefs(path, root, n, length)
		return err == nil
	})
	return err
}

// followRefs follows the chain of $refs that starts at n, recording the length of the chain
// from each of its nodes in length.
func followRefs(path string, root, n *yaml.Node, length map[*yaml.Node]int) error {
	var chain []*yaml.Node
	var refs []string
	for cur := n; cur != nil; {
		if l, seen := length[cur]; seen {
			if l == 0 { // on the chain being followed: a loop
				return fmt.Errorf("%s:%d:%d: $ref loop: %s → %s again: each $ref leads to the next and the last back to the first, so none has a value; "+
					"point one of them at a real definition", path, cur.Line, cur.Column, strings.Join(refs, " → "), refOf(cur))
			}
			break
		}
		length[cur] = 0
		chain = append(chain, cur)
		refs = append(refs, refOf(cur))
		if len(chain) > MaxRefChain {
			return fmt.Errorf("%s:%d:%d: a chain of more than %d $refs, each to another $ref (%s → %s → … → %s): "+
				"a real document chains a few; point the $refs at their definitions", path, n.Line, n.Column, MaxRefChain, refs[0], refs[1], refs[len(refs)-1])
		}
		next := pointer(root, refOf(cur))
		if next == nil || refOf(next) == "" {
			break
		}
		cur = next
	}
	// The chain's end is known now: record each node's distance to it, from the end back.
	end := 0
	if next := pointer(root, refOf(chain[len(chain)-1])); next != nil {
		end = length[next] // a chain followed before, or 0 for a value that is no $ref
	}
	for i := len(chain) - 1; i >= 0; i-- {
		end++
		length[chain[i]] = end
		if end > MaxRefChain {
			return fmt.Errorf("%s:%d:%d: a chain of more than %d $refs, each to another $ref (from %s): "+
				"a real document chains a few; point the $refs at their definitions", path, chain[i].Line, chain[i].Column, MaxRefChain, refOf(chain[i]))
		}
	}
	return nil
}

// refOf is n's local $ref ("#/components/…"), or "" when n is not a mapping with one.
func refOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "$ref" && v.Kind == yaml.ScalarNode && strings.HasPrefix(v.Value, "#/") {
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
