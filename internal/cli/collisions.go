package cli

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"sort"
	"strings"

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
// where, and which of oapi-codegen's options resolves them (passed through idemgen.yaml's
// oapi-codegen: block), or that none does and the names need x-go-name.
func collisionError(spec string, cs []collision) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: the generated package would not compile: oapi-codegen declared %d name(s) twice; nothing was written:", spec, len(cs))
	const shown = 10
	strict := 0
	for i, c := range cs {
		if strictServerName.MatchString(c.name) {
			strict++
		}
		if i < shown {
			fmt.Fprintf(&b, "\n  %s (%s)", c.name, strings.Join(c.where, ", "))
		}
	}
	if len(cs) > shown {
		fmt.Fprintf(&b, "\n  … and %d more", len(cs)-shown)
	}
	b.WriteString("\nTo resolve them, in idemgen.yaml (generate -c idemgen.yaml):" +
		"\n  oapi-codegen:" +
		"\n    output-options:" +
		"\n      resolve-type-name-collisions: true   # a schema, parameter, request body, response or header of the same name: suffixed by its section" +
		"\n    compatibility:" +
		"\n      always-prefix-enum-values: true      # enum values that collide: prefixed with their type's name")
	if strict > 0 {
		fmt.Fprintf(&b, "\n%d of them collide with a name oapi-codegen's server or client declares for an operation (…RequestObject, …Params, …JSONResponse): "+
			"no oapi-codegen option renames those; rename the schema with x-go-name: <NewName>", strict)
	} else {
		b.WriteString("\nA name that still collides needs x-go-name: <NewName> on its schema: no oapi-codegen option renames it.")
	}
	return fmt.Errorf("%s", b.String())
}
