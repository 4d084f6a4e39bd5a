package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// loadWithin loads path with Load, failing the test when it has not returned within a minute: a
// loader that read a device or waited on a FIFO would never come back.
func loadWithin(t *testing.T, path string, opts *LoadOpts) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Load(path, opts)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("Load(%s) did not return within 60s: it reads or waits on what it should refuse", path)
		return nil
	}
}

// TestRefTargetsAreBounded: a file a $ref names is held to the spec's own bounds. A device, a
// FIFO, a file over the size limit or nested too deeply is refused with an error naming the place
// of the $ref and the file, before anything reads it; so is a spec that is itself a FIFO.
func TestRefTargetsAreBounded(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	refTo := func(target string) string {
		return boundsHead + "components:\n  schemas:\n    S:\n      $ref: '" + target + "'\n"
	}
	write("big.yaml", "S: {type: string}\nx-pad: "+strings.Repeat("a", 4096)+"\n")
	write("deep.yaml", "S: "+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+"\n")
	cases := []struct {
		name, spec string
		opts       *LoadOpts
		want       []string
	}{
		{"a device", write("dev.yaml", refTo("/dev/zero#/x")), nil,
			[]string{"dev.yaml:7:7: $ref \"/dev/zero#/x\": /dev/zero: is a character device, not a regular file"}},
		{"a FIFO", write("fifo.yaml", refTo("pipe.yaml#/S")), nil,
			[]string{"fifo.yaml:7:7: $ref \"pipe.yaml#/S\": ", "pipe.yaml: is a FIFO (named pipe), not a regular file"}},
		{"over the size limit", write("over.yaml", refTo("big.yaml#/S")), &LoadOpts{MaxBytes: 1024},
			[]string{"over.yaml:7:7: $ref \"big.yaml#/S\": ", "big.yaml: the document is 0.0 MiB, over the limit of 0.0 MiB"}},
		{"nested too deeply", write("nest.yaml", refTo("deep.yaml#/S")), nil,
			[]string{"nest.yaml:7:7: $ref \"deep.yaml#/S\": ", "deep.yaml:1: the document nests deeper than 1000 levels"}},
		{"the spec itself a FIFO", fifo, nil, []string{"pipe.yaml: is a FIFO (named pipe), not a regular file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadWithin(t, c.spec, c.opts)
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

// TestRefLoopsWhateverTheSpelling: a $ref loop is refused with its chain whether it is spelled
// #/…, through the spec's own file name, or across two files, and so is a schema that includes
// itself through allOf; a schema that holds itself through a property (a tree) is no loop.
func TestRefLoopsWhateverTheSpelling(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	schemas := func(s string) string { return boundsHead + "components:\n  schemas:\n" + s }
	write("other.yaml", "B: {$ref: 'two.yaml#/components/schemas/A'}\nC: {allOf: [{$ref: 'allof-files.yaml#/components/schemas/A'}]}\n")
	cases := []struct {
		name, spec string
		want       string // "" when it loads
	}{
		{"through the file's own name", write("self.yaml", schemas("    A: {$ref: './self.yaml#/components/schemas/B'}\n    B: {$ref: './self.yaml#/components/schemas/A'}\n")),
			"self.yaml:7:8: $ref loop: ./self.yaml#/components/schemas/A (" + dir + "/self.yaml:7:8) → ./self.yaml#/components/schemas/B (" + dir + "/self.yaml:6:8) → ./self.yaml#/components/schemas/A again"},
		{"across two files", write("two.yaml", schemas("    A: {$ref: 'other.yaml#/B'}\n")),
			"two.yaml:6:8: $ref loop: other.yaml#/B (" + dir + "/two.yaml:6:8) → two.yaml#/components/schemas/A (" + dir + "/other.yaml:1:4) → other.yaml#/B again"},
		{"allOf", write("allof.yaml", schemas("    A: {allOf: [{$ref: '#/components/schemas/B'}]}\n    B: {allOf: [{$ref: '#/components/schemas/A'}, {type: object}]}\n")),
			"allOf loop: #/components/schemas/"},
		{"allOf across files", write("allof-files.yaml", schemas("    A: {allOf: [{$ref: 'other.yaml#/C'}]}\n")),
			"allof-files.yaml:6:17: allOf loop: allof-files.yaml#/components/schemas/A → other.yaml#/C → allof-files.yaml#/components/schemas/A"},
		{"a tree through a property", write("tree.yaml", schemas("    Node:\n      type: object\n      properties:\n        children: {type: array, items: {$ref: '#/components/schemas/Node'}}\n    Leaf: {allOf: [{$ref: '#/components/schemas/Node'}]}\n")), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadWithin(t, c.spec, nil)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("loaded, want %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}
