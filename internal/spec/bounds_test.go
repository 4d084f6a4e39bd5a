package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const boundsHead = "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths: {}\n"

// TestHostileDocumentsAreRefusedFast: a document nested too deeply (JSON, YAML flow and block
// style), a $ref chain too long, a $ref loop, and one over the size limit are each refused with
// an error naming the file and the place, in well under a second, before any parser recurses
// through them or kin-openapi follows their $refs.
func TestHostileDocumentsAreRefusedFast(t *testing.T) {
	t.Parallel()
	deepBlock := boundsHead + "x:\n"
	for i := range 1200 {
		deepBlock += strings.Repeat("  ", i+1) + "k:\n"
	}
	deepBlock += strings.Repeat("  ", 1201) + "v\n"
	chain := boundsHead + "components:\n  schemas:\n"
	for i := range 3000 {
		chain += fmt.Sprintf("    S%d:\n      $ref: \"#/components/schemas/S%d\"\n", i, i+1)
	}
	chain += "    S3000:\n      type: string\n"
	cases := []struct {
		name, file, doc string
		opts            *LoadOpts
		want            []string
	}{
		{"JSON nested 100,000 deep", "deep.json",
			`{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{},"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}",
			nil, []string{"deep.json:1:", "nests deeper than 1000 levels"}},
		{"YAML flow nested 5,000 deep", "flow.yaml", boundsHead + "x: " + strings.Repeat("{a: ", 5000) + "1" + strings.Repeat("}", 5000) + "\n",
			nil, []string{"flow.yaml:4:", "nests deeper than 1000 levels"}},
		{"YAML block nested 1,200 deep", "block.yaml", deepBlock, nil, []string{"block.yaml:1004:", "nests deeper than 1000 levels"}},
		{"3,000 chained $refs", "chain.yaml", chain, nil, []string{"chain.yaml:", "a chain of more than 100 $refs", "#/components/schemas/S"}},
		{"a $ref loop between responses", "loop.yaml", `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /p:
    post:
      responses:
        "200":
          $ref: "#/components/responses/A"
components:
  responses:
    A:
      $ref: "#/components/responses/B"
    B:
      $ref: "#/components/responses/A"
`, nil, []string{"loop.yaml:", "$ref loop: ", "#/components/responses/A", "#/components/responses/B"}},
		{"a self-referencing schema", "self.yaml", boundsHead + "components:\n  schemas:\n    S:\n      $ref: '#/components/schemas/S'\n",
			nil, []string{"self.yaml:7:7: $ref loop: #/components/schemas/S → #/components/schemas/S again"}},
		{"over the size limit", "big.yaml", boundsHead + "x-pad: " + strings.Repeat("a", 4096) + "\n",
			&LoadOpts{MaxBytes: 1024}, []string{"big.yaml: the document is 0.0 MiB, over the limit of 0.0 MiB", MaxBytesEnv}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Refused, not hung: a loader that followed the hostile shape would not come back
			// (how fast it refuses is for benchmarks, not for a test on a shared machine).
			done := make(chan error, 1)
			go func() {
				_, err := LoadData(c.file, []byte(c.doc), c.opts)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("LoadData did not return within 60s: it follows the hostile document instead of refusing it")
			}
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestSizeLimitIsCheckedBeforeReading: Load refuses a file over the limit from its size; the
// environment variable raises the limit.
func TestSizeLimitIsCheckedBeforeReading(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(boundsHead+"x-pad: "+strings.Repeat("a", 2048)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(MaxBytesEnv, "1000")
	if _, err := Load(path, nil); err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Errorf("Load with %s=1000: %v, want the size error", MaxBytesEnv, err)
	}
	t.Setenv(MaxBytesEnv, "-1")
	if _, err := Load(path, nil); err != nil {
		t.Errorf("Load with %s=-1 (no limit): %v", MaxBytesEnv, err)
	}
}

// TestDepthScanAcceptsRealDocuments: brackets and quotes inside scalars, comments and block
// scalars do not count as nesting.
func TestDepthScanAcceptsRealDocuments(t *testing.T) {
	t.Parallel()
	doc := boundsHead + "x-notes:\n  a: don't [count {this\n  b: 'it''s [' # a comment [[[[\n  c: |\n" +
		strings.Repeat("    text [ { \n", 3000) + "  d: \"esc \\\" [ {\"\n  e: [1, [2, {f: 3}]]\n"
	if err := depthError("ok.yaml", []byte(doc)); err != nil {
		t.Errorf("depthError on a shallow document: %v", err)
	}
}
