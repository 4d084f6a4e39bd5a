package generator

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/imports"
)

// Both generated files list more imports than a given document or router uses: oapi-codegen's
// import block is fixed, and so is most of the adapter's. They are written as goimports leaves
// them: unused imports deleted, each run of imports sorted, formatted as gofmt formats.
//
// goimports itself costs far more than that here. Before it looks at the file it runs the go
// command (go env, go list -m) in the working directory; it formats twice; and when a file names
// something it cannot place, as the adapter names the types of api.gen.go, which goimports does
// not read, it walks GOROOT and the whole module cache looking for a package to import. On a large
// document that was a quarter of a generation, and its outcome depended on the module cache of the
// machine. formatSource applies goimports' rules to the parsed file directly, and hands the file to
// goimports only when one of them would do something it does not reproduce (see pruneImports).

// gofmtConfig is go/format's printer configuration. go/format also asks the printer to normalize
// number literals (0X1P4 to 0x1p4) with a mode bit that go/printer reserves for it and does not
// export; TestGofmtConfig checks that the bit still does that.
var gofmtConfig = printer.Config{Mode: printer.UseSpaces | printer.TabIndent | 1<<30, Tabwidth: 8}

// formatSource formats src, the file name of the package, as goimports does, given the names the
// package declares in its other files (nil when there are none). It also returns the names this
// file declares at package level, and whether it did the work itself (false: goimports did).
func formatSource(name string, src []byte, declared map[string]bool) (out []byte, names map[string]bool, fast bool, err error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, nil, false, err
	}
	names = packageNames(f)
	if !pruneImports(fset, f, declared) || !formatsInOnePass(f) {
		out, err := goimports(name, src)
		return out, names, false, err
	}
	ast.SortImports(fset, f)
	var buf bytes.Buffer
	buf.Grow(len(src))
	if err := gofmtConfig.Fprint(&buf, fset, f); err != nil {
		return nil, nil, false, err
	}
	return buf.Bytes(), names, true, nil
}

// goimports is the general case: golang.org/x/tools/imports, which also adds missing imports,
// searching GOROOT and the module cache for them.
func goimports(name string, src []byte) ([]byte, error) {
	return imports.Process(name, src, &imports.Options{Comments: true, TabIndent: true, TabWidth: 8})
}

// pruneImports deletes the imports f does not use, the way goimports decides it, and reports
// whether what remains is what goimports would leave, so that sorting and printing the file is
// all that is left to do. It reports false, and f must then be discarded, when goimports would
// do more than that:
//   - the file refers to a package it does not import (pkg.Name, with pkg declared neither in
//     the file nor in declared): goimports would search for one to add;
//   - it imports "C", or has a //go:embed directive, or several import declarations, or
//     comments inside its import declaration, which goimports treats specially;
//   - a run of imports (lines without a blank line between them) mixes the standard library
//     with other modules: goimports moves them apart into groups, go/ast's sort does not.
//
// As goimports does without loading packages, it takes an import without a name to bind the
// name its path suggests (assumedImportName); every import idemgen's templates and oapi-codegen
// write binds that name.
func pruneImports(fset *token.FileSet, f *ast.File, declared map[string]bool) bool {
	// The names used as pkg.Name where pkg is not declared in this file: goimports' references.
	refs := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if x, ok := sel.X.(*ast.Ident); ok && x.Obj == nil && ast.IsExported(sel.Sel.Name) {
				refs[x.Name] = true
			}
		}
		return true
	})
	type importRef struct{ name, path string }
	var unused []importRef
	bound := map[string]bool{}
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil || p == "C" {
			return false
		}
		var name string
		if s.Name != nil {
			name = s.Name.Name
		}
		if name == "_" || name == "." {
			continue // kept, as goimports keeps them
		}
		id := name
		if id == "" {
			id = assumedImportName(p)
		}
		bound[id] = true
		if !refs[id] {
			unused = append(unused, importRef{name, p})
		}
	}
	for x := range refs {
		if !bound[x] && !declared[x] {
			return false
		}
	}
	// goimports deletes in this order; the order decides which blank lines remain.
	slices.SortFunc(unused, func(a, b importRef) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for _, u := range unused {
		astutil.DeleteNamedImport(fset, f, u.name, u.path)
	}

	for _, c := range f.Comments {
		for _, l := range c.List {
			if strings.HasPrefix(l.Text, "//go:embed") {
				return false
			}
		}
	}
	var decl *ast.GenDecl
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			break
		}
		if decl != nil || len(g.Specs) == 0 {
			return false
		}
		decl = g
	}
	if decl == nil {
		return true
	}
	for _, c := range f.Comments {
		if c.Pos() > decl.Pos() && c.Pos() < decl.End() {
			return false
		}
	}
	tf := fset.File(decl.Pos())
	for i := 1; i < len(decl.Specs); i++ {
		prev, cur := decl.Specs[i-1].(*ast.ImportSpec), decl.Specs[i].(*ast.ImportSpec)
		if tf.Line(cur.Pos()) > tf.Line(prev.End())+1 {
			continue // a blank line: cur starts a new run
		}
		if importGroup(prev) != importGroup(cur) {
			return false
		}
	}
	return true
}

// formatsInOnePass reports false for the one case where gofmt is known to change its own output,
// and goimports, which formats twice, writes what a second gofmt would: a build constraint with
// more comment lines right below it (oapi-codegen's header for std-http). gofmt moves the
// constraint into a block of its own, and only the next run reads the comment left below it as
// the package's doc comment, and formats it. withHeader writes the header gofmt would leave.
func formatsInOnePass(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for i, c := range g.List[:len(g.List)-1] {
			if isBuildLine(c.Text) && !isBuildLine(g.List[i+1].Text) {
				return false
			}
		}
	}
	return true
}

func isBuildLine(comment string) bool {
	return strings.HasPrefix(comment, "//go:build") || strings.HasPrefix(comment, "// +build")
}

// importGroup is goimports' grouping: the standard library (0), other modules (1, a first path
// element with a dot), App Engine's packages (2).
func importGroup(s *ast.ImportSpec) int {
	p, _ := strconv.Unquote(s.Path.Value)
	first, _, _ := strings.Cut(p, "/")
	switch {
	case strings.HasPrefix(p, "appengine"):
		return 2
	case strings.Contains(first, "."):
		return 1
	}
	return 0
}

// assumedImportName is the name an import path is taken to bind when its package is not loaded,
// by goimports' convention: the last path element, or the one before it when the last is a
// major version (github.com/jackc/pgx/v5: pgx), without a "go-" prefix, up to the first character
// that cannot be part of an identifier (gopkg.in/yaml.v3: yaml).
func assumedImportName(importPath string) string {
	elem := path.Base(importPath)
	if v, ok := strings.CutPrefix(elem, "v"); ok {
		if _, err := strconv.Atoi(v); err == nil && path.Dir(importPath) != "." {
			elem = path.Base(path.Dir(importPath))
		}
	}
	elem = strings.TrimPrefix(elem, "go-")
	for i, r := range elem {
		ident := r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
			r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r))
		if !ident {
			return elem[:i]
		}
	}
	return elem
}

// packageNames returns the names f declares at package level (not methods).
func packageNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names
}
