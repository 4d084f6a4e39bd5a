package payments

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/internal/cli"
)

// copyExample copies the spec, the config and the committed generated files into a temporary
// directory laid out like examples/payments, so a test can change the spec without touching the
// repository.
func copyExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := []string{"openapi.yaml", "idemgen.yaml"}
	gen, err := filepath.Glob("api/*.gen.go")
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated files in api/ (%v): run go generate ./examples/payments/...", err)
	}
	files = append(files, gen...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func idemgen(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCommittedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	code, out, errs := idemgen(t, "generate", "--check", "-c", "idemgen.yaml")
	if code != 0 {
		t.Fatalf("idemgen generate --check on the committed example: exit %d, want 0 "+
			"(run go generate ./examples/payments/...)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

func TestCheckFailsWhenTheSpecChanges(t *testing.T) {
	t.Parallel()
	dir := copyExample(t)
	cfg := filepath.Join(dir, "idemgen.yaml")
	if code, out, errs := idemgen(t, "generate", "--check", "-c", cfg); code != 0 {
		t.Fatalf("--check on an unchanged copy: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	spec := filepath.Join(dir, "openapi.yaml")
	b, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "        payment_id:\n          type: string\n          example: pay_"
	if !bytes.Contains(b, []byte(anchor)) {
		t.Fatalf("the Payment schema in openapi.yaml no longer has %q; update this test", anchor)
	}
	b = bytes.Replace(b, []byte(anchor), []byte("        description:\n          type: string\n"+anchor), 1)
	if err := os.WriteFile(spec, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := idemgen(t, "generate", "--check", "-c", cfg)
	if code != 1 {
		t.Fatalf("--check after the spec changed: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	diff := out + errs
	if !strings.Contains(diff, "api.gen.go") || !strings.Contains(diff, "+\tDescription") {
		t.Errorf("--check printed no diff naming api.gen.go with the new Description field:\n%s", diff)
	}
}
