package api_test

import (
	"encoding/json"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRendererSnippetCompiles: the renderer snippet of docs/x-idempotency.md builds against this
// package's generated types, an Open Banking-structured spec whose optional members (Id, Path,
// Url) are pointers, and is gofmt-formatted. The snippet is built as a package of its own that
// exists only in a go build -overlay, so the checkout is never written to.
func TestRendererSnippetCompiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "x-idempotency.md"))
	if err != nil {
		t.Fatal(err)
	}
	const heading = "### renderer: the API's own error format"
	_, section, ok := strings.Cut(string(doc), heading)
	if !ok {
		t.Fatalf("docs/x-idempotency.md has no %q section", heading)
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if ok {
		block, _, ok = strings.Cut(block, "```\n")
	}
	if !ok {
		t.Fatalf("the %q section has no Go block", heading)
	}
	// Declarations go to the file; the statements from the first call on, into a function that
	// has what they name (the gin engine, the server, the store).
	decls, stmts, ok := strings.Cut(block, "\napi.")
	if !ok {
		t.Fatalf("the renderer snippet does not register the handlers (no line starting with api.):\n%s", block)
	}
	stmts = "api." + stmts
	if formatted, err := format.Source([]byte(block)); err != nil || string(formatted) != block {
		t.Errorf("the renderer snippet is not gofmt-formatted (%v):\n%s", err, block)
	}
	src := `package docsnippet

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"

	"idemgen.test/golden/openbanking-client-gin/api"
)

var (
	_ = json.Marshal
	_ = strconv.Itoa
	_ http.Handler
)

` + decls + `

func register(engine *gin.Engine, server api.IdempotentServerInterface, store *idem.Store) {
` + stmts + `}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "snippet.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkgDir, err := filepath.Abs(filepath.Join("..", "docsnippet"))
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkgDir, "snippet.go"): file}})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	// The go command may rewrite go.mod and go.sum: it gets copies, as TestGenerateGolden's do.
	modfile := filepath.Join(dir, "go.mod")
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-modfile="+modfile, "-overlay", overlayFile, "-o", os.DevNull, "idemgen.test/golden/openbanking-client-gin/docsnippet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the renderer snippet of docs/x-idempotency.md does not build against an Open Banking-structured API: %v\n%s\nsource:\n%s", err, out, src)
	}
}
