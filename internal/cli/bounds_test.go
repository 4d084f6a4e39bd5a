package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestRefToDeviceOrFIFOFailsFast: a $ref to /dev/zero or to a FIFO, and a spec that is a FIFO,
// make lint, annotate and generate exit 2 with one line naming the $ref and the file, instead of
// reading forever or waiting forever; a cross-file $ref loop and an allOf loop likewise.
func TestRefToDeviceOrFIFOFailsFast(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	doc := func(name, schema string) string {
		p := filepath.Join(dir, name)
		text := "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n  /p:\n    post:\n      operationId: createP\n" +
			"      responses:\n        \"200\":\n          description: ok\n          content:\n            application/json:\n" +
			"              schema: {$ref: '#/components/schemas/A'}\ncomponents:\n  schemas:\n" + schema
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		spec, want string
	}{
		{doc("dev.yaml", "    A: {$ref: '/dev/zero#/x'}\n"), `dev.yaml:15:8: $ref "/dev/zero#/x": /dev/zero: is a character device, not a regular file`},
		{doc("fifo.yaml", "    A: {$ref: 'pipe.yaml#/x'}\n"), `fifo.yaml:15:8: $ref "pipe.yaml#/x": ` + fifo + `: is a FIFO (named pipe), not a regular file`},
		{fifo, fifo + ": is a FIFO (named pipe), not a regular file"},
		{doc("loop.yaml", "    A: {$ref: './loop.yaml#/components/schemas/A'}\n"), "loop.yaml:15:8: $ref loop: ./loop.yaml#/components/schemas/A ("},
		{doc("allof.yaml", "    A: {allOf: [{$ref: '#/components/schemas/B'}]}\n    B: {allOf: [{$ref: '#/components/schemas/A'}]}\n"),
			"allOf loop: #/components/schemas/"},
	}
	for _, c := range cases {
		for _, args := range [][]string{
			{"lint", c.spec},
			{"annotate", c.spec},
			{"generate", "--package", "api", "--output", filepath.Join(dir, "api"), c.spec},
		} {
			type result struct {
				code   int
				stderr string
			}
			done := make(chan result, 1)
			go func() {
				code, _, stderr := runMain("", args...)
				done <- result{code, stderr}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("idemgen %s %s did not return within 60s: it reads or waits on what it should refuse", args[0], c.spec)
			}
			if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
				t.Errorf("idemgen %s %s: exit %d, stderr %q; want exit 2 and one line saying %q", args[0], filepath.Base(c.spec), r.code, r.stderr, c.want)
			}
		}
	}
}
