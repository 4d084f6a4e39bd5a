package generator

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
)

// NameSource is a place in the spec that oapi-codegen derives a Go type name from, and the
// extension that renames the type there. oapi-codegen reads x-go-name on a component (a schema,
// parameter, response, request body or header of components) and x-go-type-name on a schema
// inside one (an enum property, say): the other extension at each place changes nothing, or only
// a field's name.
type NameSource struct {
	File      string
	Line, Col int
	Where     string // components.schemas.payment_status, or …Payment.properties.status
	Ext       string // "x-go-name" or "x-go-type-name"; "" for an operation, whose names no extension changes

	def any // what declares the type, to tell two places of one definition from two definitions
}

func (s NameSource) String() string {
	at := s.File
	if s.Line > 0 {
		at = fmt.Sprintf("%s:%d:%d", s.File, s.Line, s.Col)
	}
	if s.Ext == "" {
		return fmt.Sprintf("%s %s", at, s.Where)
	}
	return fmt.Sprintf("%s %s (rename it with %s: <NewName>)", at, s.Where, s.Ext)
}

// operationNames are the suffixes oapi-codegen's strict server and client add to an operation's
// name for the types they declare.
var operationNames = regexp.MustCompile(`^(.+?)(RequestObject|ResponseObject|\d{3}\w*Response|Response|Params|\w*RequestBody|HandlerFunc)$`)

// NameSources finds, for each Go name in names, the places of the spec file (raw, loaded afresh:
// oapi-codegen rewrites a document it generates from) that oapi-codegen derives it from: a
// component of that name, a schema inside one whose path gives it, an operation whose strict
// server types take it. A name with no such place is absent from the result; nil names means
// every name a component or a schema inside one gives.
func NameSources(file string, raw []byte, allowRemote bool, names []string) (map[string][]NameSource, error) {
	doc, err := loadFresh(file, raw, allowRemote)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
		if i := strings.IndexByte(n, '.'); i > 0 {
			want[n[:i]] = true // a method's type
		}
	}
	// oapi-codegen's name functions read a normaliser it sets per run: held while they run.
	oapiMu.Lock()
	defer oapiMu.Unlock()
	out := map[string][]NameSource{}
	add := func(goName string, src NameSource) {
		if names == nil || want[goName] {
			out[goName] = append(out[goName], src)
		}
	}
	at := func(o *openapi3.Origin) (string, int, int) {
		if o == nil || o.Key == nil {
			return file, 0, 0
		}
		f := o.Key.File
		if f == "" || strings.HasSuffix(file, f) || strings.HasSuffix(f, file) {
			f = file
		}
		return f, o.Key.Line, o.Key.Column
	}
	source := func(o *openapi3.Origin, where, ext string, def any) NameSource {
		f, l, c := at(o)
		return NameSource{File: f, Line: l, Col: c, Where: where, Ext: ext, def: def}
	}
	c := doc.Components
	if c != nil {
		for _, name := range sortedKeys(c.Schemas) {
			ref := c.Schemas[name]
			where := "components.schemas." + name
			var origin *openapi3.Origin
			if ref.Value != nil {
				origin = ref.Value.Origin
			}
			add(goNameOf(name, ref.Value), source(origin, where, "x-go-name", ref))
			if ref.Ref == "" && ref.Value != nil {
				inline(ref.Value, []string{name}, where, 0, map[string]bool{}, func(goName string, s *openapi3.Schema, w string) {
					add(goName, source(s.Origin, w, "x-go-type-name", s))
				})
			}
		}
		section := func(sec string, names []string, origin func(string) *openapi3.Origin) {
			for _, name := range names {
				add(codegen.SchemaNameToTypeName(name), source(origin(name), "components."+sec+"."+name, "x-go-name", sec+"/"+name))
			}
		}
		section("parameters", sortedKeys(c.Parameters), func(n string) *openapi3.Origin {
			if v := c.Parameters[n].Value; v != nil {
				return v.Origin
			}
			return nil
		})
		section("responses", sortedKeys(c.Responses), func(n string) *openapi3.Origin {
			if v := c.Responses[n].Value; v != nil {
				return v.Origin
			}
			return nil
		})
		section("requestBodies", sortedKeys(c.RequestBodies), func(n string) *openapi3.Origin {
			if v := c.RequestBodies[n].Value; v != nil {
				return v.Origin
			}
			return nil
		})
		section("headers", sortedKeys(c.Headers), func(n string) *openapi3.Origin {
			if v := c.Headers[n].Value; v != nil {
				return v.Origin
			}
			return nil
		})
	}
	if doc.Paths != nil {
		for _, path := range doc.Paths.InMatchingOrder() {
			item := doc.Paths.Value(path)
			for method, op := range item.Operations() {
				if op.OperationID == "" {
					continue
				}
				base := codegen.ToCamelCase(op.OperationID)
				for n := range want {
					if m := operationNames.FindStringSubmatch(n); m != nil && m[1] == base {
						add(n, source(op.Origin, "operation "+op.OperationID+" ("+method+" "+path+"), whose strict server declares "+n, "", op))
					}
				}
			}
		}
	}
	for n := range out {
		sort.SliceStable(out[n], func(i, j int) bool {
			a, b := out[n][i], out[n][j]
			if a.Line != b.Line {
				return a.Line < b.Line
			}
			return a.Where < b.Where
		})
	}
	return out, nil
}

// goNameOf is the type name oapi-codegen gives components.schemas.name: its x-go-name, else the
// name made a Go name.
func goNameOf(name string, s *openapi3.Schema) string {
	if s != nil {
		if v, ok := s.Extensions["x-go-name"].(string); ok && v != "" {
			return v
		}
	}
	return codegen.SchemaNameToTypeName(name)
}

// inline calls fn for each schema under s (its properties, and those it takes through allOf)
// with the type name oapi-codegen gives it when it declares one there (an enum, or a schema
// named with x-go-type-name): the path's names joined.
func inline(s *openapi3.Schema, path []string, where string, depth int, seen map[string]bool, fn func(goName string, s *openapi3.Schema, where string)) {
	key := fmt.Sprintf("%p %s", s, strings.Join(path, "/"))
	if s == nil || seen[key] || depth > 32 {
		return
	}
	seen[key] = true
	for _, p := range sortedKeys(s.Properties) {
		ref := s.Properties[p]
		if ref == nil || ref.Ref != "" || ref.Value == nil {
			continue
		}
		sub := append(slices.Clip(path), p)
		w := where + ".properties." + p
		name := codegen.SchemaNameToTypeName(codegen.PathToTypeName(slices.Clone(sub)))
		if v, ok := ref.Value.Extensions["x-go-type-name"].(string); ok && v != "" {
			name = v
		}
		// oapi-codegen declares a type inside a component for an enum, or where x-go-type-name
		// names one; other inline schemas become anonymous structs.
		if _, named := ref.Value.Extensions["x-go-type-name"]; named || len(ref.Value.Enum) > 0 {
			fn(name, ref.Value, w)
		}
		inline(ref.Value, sub, w, depth+1, seen, fn)
	}
	// oapi-codegen merges allOf: the items' properties are the schema's own, named by its path.
	for i, item := range s.AllOf {
		if item == nil || item.Value == nil {
			continue
		}
		w := fmt.Sprintf("%s.allOf[%d]", where, i)
		if item.Ref != "" {
			w += " (" + item.Ref + ")"
		}
		inline(item.Value, path, w, depth+1, seen, fn)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// duplicateTypename reads the type name out of oapi-codegen's "duplicate typename 'X' detected"
// error, or "".
var duplicateTypename = regexp.MustCompile(`duplicate typename '([^']+)' detected`)

// explainDuplicate adds to oapi-codegen's duplicate-typename error every type name the document
// gives to more than one schema (oapi-codegen stops at the first), each with its places and the
// extension that renames the type at each (oapi-codegen's own message names x-go-name, which
// inside a component renames only a field).
func explainDuplicate(file string, raw []byte, allowRemote bool, err error) string {
	m := duplicateTypename.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	all, lerr := NameSources(file, raw, allowRemote, nil)
	if lerr != nil {
		return ""
	}
	dups := duplicates(all)
	if len(dups) == 0 || !slices.Contains(dups, m[1]) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe document gives %d type name(s) to more than one schema (oapi-codegen stops at the first); rename one place of each with the extension named beside it:", len(dups))
	for _, name := range dups {
		fmt.Fprintf(&b, "\n  %s:", name)
		for _, s := range all[name] {
			b.WriteString("\n    " + s.String())
		}
	}
	return b.String()
}

// duplicates lists, sorted, the names that sources gives to more than one definition.
func duplicates(all map[string][]NameSource) []string {
	var out []string
	for name, srcs := range all {
		defs := map[any]bool{}
		for _, s := range srcs {
			if s.Ext != "" && !strings.HasPrefix(s.Where, "components.") {
				continue
			}
			defs[s.def] = true
		}
		schemas := 0
		for _, s := range srcs {
			if strings.HasPrefix(s.Where, "components.schemas.") {
				schemas++
			}
		}
		if len(defs) > 1 && schemas > 1 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
