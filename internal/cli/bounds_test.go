package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefLoopIsAClearError: a $ref loop between responses makes lint, annotate and generate
// exit 2 with one line naming the file, the place and the loop, never a panic's stack trace.
func TestRefLoopIsAClearError(t *testing.T) {
	dir := t.TempDir()
	spec := filepath.Join(dir, "loop.yaml")
	if err := os.WriteFile(spec, []byte(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /p:
    post:
      operationId: createP
      responses:
        "200":
          $ref: "#/components/responses/A"
components:
  responses:
    A:
      $ref: "#/components/responses/B"
    B:
      $ref: "#/components/responses/A"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"lint", spec},
		{"annotate", spec},
		{"generate", "--package", "api", "--output", filepath.Join(dir, "api"), spec},
	} {
		code, _, stderr := runMain("", args...)
		if code != ExitUsage || !strings.Contains(stderr, "loop.yaml:15:7: $ref loop: #/components/responses/A → #/components/responses/B → #/components/responses/A again") ||
			strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("idemgen %s: exit %d, stderr %q; want exit 2 and one line naming the file, the place and the loop", args[0], code, stderr)
		}
	}
}
