package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// sample is a module whose packages cover what go test reports: a pass, a failure in a subtest,
// a package without tests, one that does not compile, and one that runs until the test has seen
// testprogress name it as still running.
var sample = map[string]string{
	"go.mod": "module prog.test\n\ngo 1.26\n",
	"pass/pass_test.go": `package pass

import "testing"

func TestOK(t *testing.T) { t.Log("a log line of a passing test") }
`,
	"fail/fail_test.go": `package fail

import "testing"

func TestFine(t *testing.T) {}

func TestBad(t *testing.T) {
	t.Run("sub", func(t *testing.T) { t.Error("boom") })
}
`,
	"none/none.go": "package none\n",
	"broken/broken.go": `package broken

func X() int { return "not an int" }
`,
	"broken/broken_test.go": "package broken\n",
	"slow/slow_test.go": `package slow

import (
	"os"
	"testing"
	"time"
)

// TestUntilReleased waits for the file the test creates once testprogress said this package is
// still running.
func TestUntilReleased(t *testing.T) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat("RELEASE"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the release file never appeared: testprogress did not say that prog.test/slow was still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
`,
}

// releaser is testprogress's stderr: it creates the release file once a line names the slow
// package as still running.
type releaser struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	file string
	done bool
}

func (r *releaser) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(b)
	if !r.done && regexp.MustCompile(`still running: .*prog\.test/slow \(\d+s\)`).Match(r.buf.Bytes()) {
		r.done = true
		if err := os.WriteFile(r.file, nil, 0o644); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

func (r *releaser) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// writeSample writes the sample module; its slow test waits for the file release.
func writeSample(t *testing.T, release string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range sample {
		src = strings.ReplaceAll(src, `"RELEASE"`, strconv.Quote(release))
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestFailingRun: a run with failures prints each package's go test line, the output of the
// failed tests and nothing of the passing ones, names a package that is still running, ends
// with go test's closing FAIL and exits with go test's status.
func TestFailingRun(t *testing.T) {
	t.Parallel()
	release := filepath.Join(t.TempDir(), "release")
	dir := writeSample(t, release)
	var stdout bytes.Buffer
	stderr := &releaser{file: release}
	code := run([]string{"-every", "50ms", "go", "-C", dir, "test", "-count=1", "./..."}, &stdout, stderr)
	out := stdout.String()
	if code != 1 {
		t.Errorf("exit %d, want go test's 1\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile("(?m)^ok  \tprog.test/pass\t[0-9.]+s$"),
		regexp.MustCompile("(?m)^ok  \tprog.test/slow\t[0-9.]+s$"),
		regexp.MustCompile("(?m)^\\?   \tprog.test/none\t\\[no test files\\]$"),
		regexp.MustCompile("(?m)^FAIL\tprog.test/broken \\[build failed\\]$"),
		regexp.MustCompile("(?m)^    fail_test.go:8: boom\n--- FAIL: TestBad/sub \\([0-9.]+s\\)\n--- FAIL: TestBad \\([0-9.]+s\\)\nFAIL\nFAIL\tprog.test/fail\t[0-9.]+s$"),
		regexp.MustCompile("\nFAIL\n$"),
	} {
		if !want.MatchString(out) {
			t.Errorf("stdout does not match %s:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"=== RUN", "--- PASS", "a log line of a passing test", "TestFine", "\nPASS\n"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("stdout has %q, which go test without -v does not print:\n%s", unwanted, out)
		}
	}
	if !strings.Contains(stderr.String(), "broken.go:3:23: cannot use \"not an int\"") {
		t.Errorf("stderr lacks the compile error of prog.test/broken:\n%s", stderr)
	}
}

// TestPassingRun: a clean run prints go test's lines only and exits 0.
func TestPassingRun(t *testing.T) {
	t.Parallel()
	dir := writeSample(t, "")
	var stdout, stderr bytes.Buffer
	code := run([]string{"go", "-C", dir, "test", "-count=1", "./pass/...", "./none/..."}, &stdout, &stderr)
	want := regexp.MustCompile("^(ok  \tprog.test/pass\t[0-9.]+s\n\\?   \tprog.test/none\t\\[no test files\\]\n|\\?   \tprog.test/none\t\\[no test files\\]\nok  \tprog.test/pass\t[0-9.]+s\n)$")
	if code != 0 || !want.MatchString(stdout.String()) {
		t.Errorf("exit %d, stdout\n%s\nwant exit 0 and\n%s\nstderr:\n%s", code, stdout.String(), want, stderr.String())
	}
}

// TestUsage: a command line that is not go test is refused.
func TestUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"go", "vet"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage: testprogress") {
		t.Errorf("exit %d, stderr %q; want 2 and the usage", code, stderr.String())
	}
}
