package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/imports"

	"github.com/idemgen/idemgen/internal/cli"
)

// repoRoot is the checkout this package lives in.
const repoRoot = "../.."

// readmeBlock is a fenced block of README.md that a test uses. A block is marked by an HTML
// comment on the line before its opening fence,
//
//	<!-- readme-test: NAME -->
//
// which renders as nothing, so the README can be rewritten freely: what a test needs is found by
// its name, not by its position, and a test fails when a block it needs is gone.
type readmeBlock struct {
	name, lang, text string
	line             int // of the opening fence
}

var (
	markerLine = regexp.MustCompile(`^<!--\s*readme-test:\s*(.+?)\s*-->$`)
	fenceLine  = regexp.MustCompile("^```([a-z]*)\\s*$")
)

// readmeBlocks returns the marked blocks of README.md by name. It fails the test when a marker
// marks no block, a name is used twice or is not one of known, a known name has no block, or a
// Go block is not marked: every Go snippet of the README must be compiled by some test.
func readmeBlocks(t *testing.T, known ...string) map[string]readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	blocks := map[string]readmeBlock{}
	pending, pendingLine := "", 0
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if m := markerLine.FindStringSubmatch(l); m != nil {
			pending, pendingLine = m[1], i+1
			continue
		}
		if l == "" {
			continue
		}
		m := fenceLine.FindStringSubmatch(l)
		if m == nil {
			if pending != "" {
				t.Errorf("README.md:%d: the marker %q is not followed by a fenced block", pendingLine, pending)
				pending = ""
			}
			continue
		}
		// A fenced block: read it to its closing fence.
		b := readmeBlock{name: pending, lang: m[1], line: i + 1}
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, lines[i])
		}
		b.text = strings.Join(body, "\n") + "\n"
		switch {
		case pending == "" && b.lang == "go":
			t.Errorf("README.md:%d: a Go block without a <!-- readme-test: NAME --> marker: mark it, and build it in cmd/idemgen/readme_test.go", b.line)
		case pending == "":
		case !slices.Contains(known, pending):
			t.Errorf("README.md:%d: unknown marker %q (known: %s)", pendingLine, pending, strings.Join(known, "; "))
		case blocks[pending].text != "":
			t.Errorf("README.md:%d: marker %q is used twice", pendingLine, pending)
		default:
			blocks[pending] = b
		}
		pending = ""
	}
	for _, k := range known {
		if _, ok := blocks[k]; !ok {
			t.Errorf("README.md has no block marked <!-- readme-test: %s -->", k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return blocks
}

// Names of the README's marked blocks.
const (
	readmeSpec           = "openapi.yaml"
	readmeAnnotateOut    = "annotate output"
	readmeAnnotated      = "annotated openapi.yaml, excerpts"
	readmeConfig         = "idemgen.yaml"
	readmeGenerateGo     = "api/generate.go"
	readmeDecls          = "main.go, declarations"
	readmeMain           = "main.go, body of main"
	readmeInstallRelease = "install from a release"
	readmeInstallLocal   = "install from a checkout"
	readmeClient         = "client"
	readmeSavepoint      = "savepoint"
)

var readmeNames = []string{readmeSpec, readmeAnnotateOut, readmeAnnotated, readmeConfig, readmeGenerateGo,
	readmeDecls, readmeMain, readmeInstallRelease, readmeInstallLocal, readmeRouters, readmeClient, readmeSavepoint}

// readmeRouters marks the wiring snippets of the routers section. They need the frameworks,
// which this module does not depend on, so TestReadmeRouterSnippets checks them against the
// router golden cases instead of building them.
const readmeRouters = "routers"

// scratchModule creates an empty module in dir that requires this checkout through a replace
// directive, as a user's module does when it depends on a checkout. Its go.sum starts as this
// repository's, which holds the checksums of every module idemgen needs, so that builds in it
// look nothing up.
func scratchModule(t *testing.T, dir, path string) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	gomod := fmt.Sprintf("module %s\n\ngo 1.26.0\n\nrequire github.com/idemgen/idemgen v0.0.0\n\nreplace github.com/idemgen/idemgen => %s\n", path, root)
	writeFile(t, filepath.Join(dir, "go.mod"), gomod)
	copyGoSum(t, dir)
}

func copyGoSum(t *testing.T, dir string) {
	t.Helper()
	sum, err := os.ReadFile(filepath.Join(repoRoot, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "go.sum"), string(sum))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goCmd runs the go command in dir with the module cache as its only source of modules, so a
// build never reaches for the network, and returns its combined output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod "+os.Getenv("GOFLAGS"), "GOPROXY=off", "GOWORK=off", "GOSUMDB=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestReadmeSnippetsBuild follows the README's walkthrough: it annotates the README's spec with
// idemgen annotate, checks that annotate prints and writes what the README shows, generates
// the code with the README's idemgen.yaml, and builds the README's Go blocks as one program
// against that code. A change to annotate or to the generated code that the README does not
// follow fails here.
func TestReadmeSnippetsBuild(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, readmeNames...)
	dir := t.TempDir()
	scratchModule(t, dir, "example.com/payments")
	spec := filepath.Join(dir, "openapi.yaml")
	writeFile(t, spec, blocks[readmeSpec].text)

	// Step 1: annotate, which must print what the README shows.
	cmdLine, wantStderr, _ := strings.Cut(blocks[readmeAnnotateOut].text, "\n")
	if cmdLine != "$ go tool idemgen annotate openapi.yaml -w" {
		t.Fatalf("README.md:%d: the annotate block starts with %q, want the command this test runs: $ go tool idemgen annotate openapi.yaml -w", blocks[readmeAnnotateOut].line, cmdLine)
	}
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"annotate", spec, "-w"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("idemgen annotate: exit %d\n%s", code, stderr.String())
	}
	if got := strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), ""); got != wantStderr {
		t.Errorf("README.md:%d: idemgen annotate prints\n%s\nbut the README shows\n%s", blocks[readmeAnnotateOut].line, got, wantStderr)
	}
	annotated, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range strings.Split(blocks[readmeAnnotated].text, "# …\n") {
		if !strings.Contains(string(annotated), chunk) {
			t.Errorf("README.md:%d: the annotated spec does not contain\n%s\nIt is:\n%s", blocks[readmeAnnotated].line, chunk, annotated)
		}
	}

	// Step 2: generate with the README's config, next to the README's go:generate file.
	writeFile(t, filepath.Join(dir, "idemgen.yaml"), blocks[readmeConfig].text)
	writeFile(t, filepath.Join(dir, "api", "generate.go"), blocks[readmeGenerateGo].text)
	stderr.Reset()
	if code := cli.Main([]string{"generate", "-c", filepath.Join(dir, "idemgen.yaml")}, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("idemgen generate with the README's idemgen.yaml: exit %d\n%s", code, stderr.String())
	}

	// Steps 3 and 4: one program. Its imports are listed here and trimmed to what is used, so
	// the README's blocks can stay free of import lists.
	var src strings.Builder
	src.WriteString(`package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"

	"example.com/payments/api"
)

`)
	src.WriteString(blocks[readmeDecls].text)
	src.WriteString("\n" + blocks[readmeSavepoint].text)
	// The client's function, built against the client.gen.go that client: true writes.
	src.WriteString("\n" + blocks[readmeClient].text)
	src.WriteString("\nfunc main() {\n\tctx := context.Background()\n")
	sc := bufio.NewScanner(strings.NewReader(blocks[readmeMain].text))
	for sc.Scan() {
		src.WriteString("\t" + sc.Text() + "\n")
	}
	src.WriteString("}\n")
	out, err := imports.Process("main.go", []byte(src.String()), &imports.Options{Comments: true, TabIndent: true, TabWidth: 8})
	if err != nil {
		t.Fatalf("the README's Go blocks (README.md:%d and :%d) do not parse as one program: %v\n%s",
			blocks[readmeDecls].line, blocks[readmeMain].line, err, src.String())
	}
	writeFile(t, filepath.Join(dir, "main.go"), string(out))
	goCmd(t, dir, "build", "./...")
	goCmd(t, dir, "vet", "./...")
}

// TestMakeTargetsDocumented: the README's table of make targets says, target by target and in
// the same order, what `make help` says (backticks aside).
func TestMakeTargetsDocumented(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("make", "-s", "help")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	var help []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		target, desc, _ := strings.Cut(strings.TrimSpace(l), " ")
		help = append(help, target+": "+strings.TrimSpace(desc))
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `make ([a-z-]+)` \\| (.*) \\|$")
	var readme []string
	for _, l := range strings.Split(string(data), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			readme = append(readme, m[1]+": "+strings.ReplaceAll(m[2], "`", ""))
		}
	}
	if len(help) < 2 {
		t.Fatalf("make help printed %d targets:\n%s", len(help), out)
	}
	if !slices.Equal(help, readme) {
		t.Errorf("make help and the README's table of targets differ.\nmake help:\n  %s\nREADME.md:\n  %s",
			strings.Join(help, "\n  "), strings.Join(readme, "\n  "))
	}
}

// TestReadmeRouterSnippets checks the README's router wiring: the block parses as Go statements,
// and every generated identifier it calls (api.X) is one the router golden cases in testdata
// generate, so a rename in the templates cannot leave the README behind.
func TestReadmeRouterSnippets(t *testing.T) {
	b := readmeBlocks(t, readmeNames...)[readmeRouters]
	src := "package p\nfunc _() {\n" + b.text + "\n}\n"
	f, err := parser.ParseFile(token.NewFileSet(), "README.md", src, 0)
	if err != nil {
		t.Fatalf("README.md:%d: the router snippets do not parse as Go statements: %v", b.line, err)
	}
	var generated strings.Builder
	matches, _ := filepath.Glob(filepath.Join(repoRoot, "testdata", "router-*", "api", "idempotency.gen.go"))
	if len(matches) < 9 {
		t.Fatalf("found %d router golden cases, want the nine", len(matches))
	}
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		generated.Write(data)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "api" {
			name := sel.Sel.Name
			if !strings.Contains(generated.String(), "func "+name+"(") && !strings.Contains(generated.String(), "type "+name+" ") {
				t.Errorf("README.md:%d: the router snippets call api.%s, which no router golden case generates", b.line, name)
			}
		}
		return true
	})
}
