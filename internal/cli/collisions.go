package cli

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"regexp"
	"sort"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/internal/generator"
)

// A collision is a name the generated package declares more than once: oapi-codegen derives Go
// names from the document's names, and two of them (a schema and a response, a schema and a
// type its strict server declares, two enums' values) can come out the same. The package then
// does not compile ("X redeclared in this block").
type collision struct {
	name  string // "Foo", or "Foo.Bar" for a method Bar of Foo
	where []string
}

// collisions parses the generated files and lists the names declared twice at package level (and
// the methods declared twice on one type), sorted by name. Parsing is enough to find them: a name
// declared twice is an error whatever the rest of the package says, and needs none of its
// imports, so this costs milliseconds where a build would cost the package's dependencies.
func collisions(files generator.Files) ([]collision, error) {
	fset := token.NewFileSet()
	seen := map[string][]string{}
	for _, name := range files.Names() {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, files[name], parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("the generated %s does not parse: %w", name, err)
		}
		add := func(id *ast.Ident, prefix string) {
			if id == nil || id.Name == "_" || (prefix == "" && id.Name == "init") {
				return
			}
			p := fset.Position(id.Pos())
			seen[prefix+id.Name] = append(seen[prefix+id.Name], fmt.Sprintf("%s:%d", p.Filename, p.Line))
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					add(d.Name, "")
					continue
				}
				add(d.Name, receiverName(d.Recv.List[0].Type)+".")
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						add(s.Name, "")
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(n, "")
						}
					}
				}
			}
		}
	}
	var out []collision
	for name, where := range seen {
		if len(where) > 1 {
			out = append(out, collision{name, where})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// receiverName is the type name of a method's receiver: T, *T, T[K], *T[K].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}

// strictServerName matches the names oapi-codegen's strict server and client declare for each
// operation: a schema or component with one of them collides with code no option renames.
var strictServerName = regexp.MustCompile(`(RequestObject|ResponseObject|\d{3}(JSON|Text|FormdataRequestBody|Multipart)?Response|JSONRequestBody|Params|HandlerFunc)$`)

// collisionError says that the generated package would not compile, which names collide and
// where in the spec they come from, with the extension that renames the type at each place
// (x-go-name on a component, x-go-type-name on a schema inside one), and which of oapi-codegen's
// options resolves them (passed through idemgen.yaml's oapi-codegen: block), unless opts sets
// them already: a second run after applying the advice does not give the same advice again.
func collisionError(opts *generator.Options, raw []byte, cs []collision) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the generated package would not compile: oapi-codegen declared %d name(s) twice; nothing was written:", opts.Spec, len(cs))
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.name
	}
	// Where the names come from in the spec: the generated files were never written, so their
	// lines are only a fallback.
	sources, _ := generator.NameSources(opts.Spec, raw, opts.AllowRemoteRefs, names)
	const shown = 10
	strict, located := 0, 0
	for i, c := range cs {
		if strictServerName.MatchString(c.name) {
			strict++
		}
		srcs := sources[c.name]
		if srcs == nil {
			if t, _, ok := strings.Cut(c.name, "."); ok {
				srcs = sources[t]
			}
		}
		if len(srcs) > 0 {
			located++
		}
		if i >= shown {
			continue
		}
		if len(srcs) == 0 {
			fmt.Fprintf(&b, "\n  %s (generated at %s; no place in the spec names it)", c.name, strings.Join(c.where, ", "))
			continue
		}
		fmt.Fprintf(&b, "\n  %s, from:", c.name)
		for _, src := range srcs {
			b.WriteString("\n    " + src.String())
		}
	}
	if len(cs) > shown {
		fmt.Fprintf(&b, "\n  … and %d more", len(cs)-shown)
	}
	var cfg codegen.Configuration
	if opts.OapiCodegen != nil {
		cfg = *opts.OapiCodegen
	}
	var options []string
	if !cfg.OutputOptions.ResolveTypeNameCollisions && strict < len(cs) {
		options = append(options, "    output-options:",
			"      resolve-type-name-collisions: true   # a schema, parameter, request body, response or header of the same name: suffixed by its section")
	}
	if !cfg.Compatibility.AlwaysPrefixEnumValues && strict < len(cs) {
		options = append(options, "    compatibility:",
			"      always-prefix-enum-values: true      # enum values that collide: prefixed with their type's name")
	}
	if len(options) > 0 {
		b.WriteString("\nTo resolve them, in idemgen.yaml (generate -c idemgen.yaml):\n  oapi-codegen:\n" + strings.Join(options, "\n"))
		b.WriteString("\nor rename one place of each in the spec with the extension named beside it.")
	} else {
		b.WriteString("\nNo oapi-codegen option resolves these")
		if cfg.OutputOptions.ResolveTypeNameCollisions {
			b.WriteString(" (resolve-type-name-collisions is on already)")
		}
		b.WriteString(": rename one place of each in the spec with the extension named beside it.")
	}
	if strict > 0 {
		fmt.Fprintf(&b, "\n%d of them collide with a name oapi-codegen's server or client declares for an operation (…RequestObject, …Params, …JSONResponse), which no option renames: rename the schema.", strict)
	}
	_ = located
	return fmt.Errorf("%s", b.String())
}

// undefined lists the names the generated package uses at package level without declaring them,
// sorted, each with its first place. oapi-codegen's resolve-type-name-collisions renames a
// component but not every type it derives from its old name, which leaves such references;
// the package would not compile. A type check with no imports finds them in milliseconds:
// what the imports declare is unknown to it, and go/types reports only the failed imports
// for those, not every use.
func undefined(files generator.Files) []collision {
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files.Names() {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, files[name], parser.SkipObjectResolution)
		if err != nil {
			return nil // reported elsewhere
		}
		parsed = append(parsed, f)
	}
	// A failed import is named after its path's last element; a module's major version
	// (…/pgx/v5) is not the package's name, which is then "undefined" as well: not ours.
	pkgNames := map[string]bool{}
	for _, f := range parsed {
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			parts := strings.Split(path, "/")
			for _, p := range parts {
				pkgNames[strings.ReplaceAll(strings.TrimPrefix(p, "go-"), "-", "")] = true
				pkgNames[p] = true
			}
			if imp.Name != nil {
				pkgNames[imp.Name.Name] = true
			}
		}
	}
	seen := map[string][]string{}
	conf := types.Config{
		Importer: noImports{},
		Error: func(err error) {
			var te types.Error
			if !errors.As(err, &te) || te.Soft && !strings.HasPrefix(te.Msg, "undefined: ") {
				return
			}
			name, ok := strings.CutPrefix(te.Msg, "undefined: ")
			if !ok || strings.Contains(name, ".") || pkgNames[name] {
				return
			}
			p := fset.Position(te.Pos)
			seen[name] = append(seen[name], fmt.Sprintf("%s:%d", p.Filename, p.Line))
		},
	}
	_, _ = conf.Check("generated", fset, parsed, nil)
	var out []collision
	for name, where := range seen {
		out = append(out, collision{name, where[:1]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

type noImports struct{}

func (noImports) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("not imported: %s", path)
}

// undefinedError says that oapi-codegen's output refers to names it never declared, and which
// components of the spec share the name the dangling ones start with.
func undefinedError(opts *generator.Options, raw []byte, us []collision) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the generated package would not compile: oapi-codegen's code refers to %d name(s) it never declared; nothing was written:", opts.Spec, len(us))
	all, _ := generator.NameSources(opts.Spec, raw, opts.AllowRemoteRefs, nil)
	for i, u := range us {
		if i == 10 {
			fmt.Fprintf(&b, "\n  … and %d more", len(us)-10)
			break
		}
		fmt.Fprintf(&b, "\n  %s (generated at %s)", u.name, u.where[0])
		// The component it was derived from: the longest component name it starts with, when
		// more than one section has it.
		best := ""
		for name, srcs := range all {
			if strings.HasPrefix(u.name, name) && len(name) > len(best) && len(srcs) > 1 {
				best = name
			}
		}
		if best != "" {
			fmt.Fprintf(&b, ", derived from %s, which names:", best)
			for _, src := range all[best] {
				fmt.Fprintf(&b, "\n    %s:%d:%d %s", src.File, src.Line, src.Col, src.Where)
			}
		}
	}
	if opts.OapiCodegen != nil && opts.OapiCodegen.OutputOptions.ResolveTypeNameCollisions {
		b.WriteString("\nresolve-type-name-collisions renames a component whose name another section also has, but not every type oapi-codegen's strict server derives from the old name " +
			"(nor does x-go-name on a response): turn the option off, or rename one component of each pair in the spec (its key, and the $refs to it)")
	}
	return fmt.Errorf("%s", b.String())
}
