package cli

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update is the package's -update flag; other golden tests in package cli should use it too
// (defining the flag twice panics).
var update = flag.Bool("update", false, "rewrite the golden files of ../../testdata/<case>/")

// goldenRoot holds one folder per case. It is a Go module of its own (go.mod replaces
// github.com/idemgen/idemgen with ../), so the golden code is compiled against this checkout.
const goldenRoot = "../../testdata"

// TestGenerateGolden runs `idemgen generate` on every case folder of goldenRoot and compares
// exit code, stderr and the generated files with the committed ones.
//
// A case folder holds the input (openapi.yaml or .json, optionally idemgen.yaml and anything
// they refer to) and the expectation: the *.gen.go files, stderr.txt when something is printed,
// exit when the exit code is not 0. args, when present, is the command line (split on spaces);
// otherwise it is `generate` with an idemgen.yaml, else `generate --package api --output api
// openapi.yaml`. The command runs in a copy of the folder, so paths in messages are relative.
//
// Each successful case is then run again with --check, which must exit 0 with no output: a
// second generation is byte-identical. Finally the golden code is built and vetted.
//
// -update rewrites the expectations.
//
// Cases run one after the other: the command resolves relative paths against the working
// directory, which t.Chdir changes for the whole process.
func TestGenerateGolden(t *testing.T) {
	root, err := filepath.Abs(goldenRoot)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		if !isGoldenCase(dir) {
			continue
		}
		ran++
		t.Run(e.Name(), func(t *testing.T) { runGoldenCase(t, dir) })
	}
	if ran == 0 {
		t.Fatalf("no case folders found in %s", goldenRoot)
	}
	if t.Failed() {
		return
	}
	t.Run("compile", func(t *testing.T) {
		for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			// Every module the golden code needs is a dependency of this module, so it is in
			// the module cache; the network is never needed.
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), goldenRoot, err, out)
			}
		}
	})
}

func isGoldenCase(dir string) bool {
	for _, name := range []string{"openapi.yaml", "openapi.json", "idemgen.yaml", "args"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

func runGoldenCase(t *testing.T, dir string) {
	work := t.TempDir()
	goldenCopyInputs(t, dir, work)
	args := goldenArgs(t, dir)
	t.Chdir(work)

	code, stdout, stderr := genRunMain(args...)
	stderr = strings.ReplaceAll(stderr, work, "$WORK")
	got := goldenGenFiles(t, ".")

	if *update {
		goldenWrite(t, dir, code, stderr, got)
		return
	}
	wantCode := 0
	if b, err := os.ReadFile(filepath.Join(dir, "exit")); err == nil {
		wantCode, err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s/exit: %v", dir, err)
		}
	}
	if code != wantCode {
		t.Errorf("exit code %d, want %d\nstderr:\n%s", code, wantCode, stderr)
	}
	wantStderr, _ := os.ReadFile(filepath.Join(dir, "stderr.txt"))
	if d := cmp.Diff(string(wantStderr), stderr); d != "" {
		t.Errorf("stderr differs (-want +got):\n%s", d)
	}
	if stdout != "" {
		t.Errorf("generate printed to stdout:\n%s", stdout)
	}
	want := goldenGenFiles(t, dir)
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("%s was not generated", name)
		}
	}
	for name, b := range got {
		w, ok := want[name]
		if !ok {
			t.Errorf("unexpected file %s", name)
			continue
		}
		if !bytes.Equal(w, b) {
			t.Errorf("%s differs from the golden file (run go test ./internal/cli -run TestGenerateGolden -update):\n%s", name, cmp.Diff(string(w), string(b)))
		}
	}
	if code != 0 || t.Failed() {
		return
	}
	// A second, separate generation must give the same bytes.
	code, stdout, stderr = genRunMain(append(args, "--check")...)
	if code != 0 || stdout != "" {
		t.Errorf("second run with --check: exit %d, want 0 with nothing printed\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func goldenArgs(t *testing.T, dir string) []string {
	if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
		return strings.Fields(string(b))
	}
	if _, err := os.Stat(filepath.Join(dir, "idemgen.yaml")); err == nil {
		return []string{"generate"}
	}
	specName := "openapi.yaml"
	if _, err := os.Stat(filepath.Join(dir, "openapi.json")); err == nil {
		specName = "openapi.json"
	}
	return []string{"generate", "--package", "api", "--output", "api", specName}
}

// copyInputs copies the case folder without its expectations.
func goldenCopyInputs(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if goldenIsExpectation(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func goldenIsExpectation(rel string) bool {
	return strings.HasSuffix(rel, ".gen.go") || rel == "stderr.txt" || rel == "exit"
}

// genFiles returns the *.gen.go files under dir by slash-separated relative path.
func goldenGenFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".gen.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func goldenWrite(t *testing.T, dir string, code int, stderr string, files map[string][]byte) {
	t.Helper()
	for name := range goldenGenFiles(t, dir) {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goldenWriteOrRemove(t, filepath.Join(dir, "stderr.txt"), stderr)
	exit := ""
	if code != 0 {
		exit = strconv.Itoa(code) + "\n"
	}
	goldenWriteOrRemove(t, filepath.Join(dir, "exit"), exit)
}

func goldenWriteOrRemove(t *testing.T, path, content string) {
	t.Helper()
	if content == "" {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runMain runs the CLI in-process.
func genRunMain(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}
