// Command testprogress runs `go test` and shows its progress: what go test prints, package by
// package as each one finishes (go test itself holds a package's result back until every package
// listed before it has finished), and, whenever nothing has been printed for a while, a line on
// stderr naming the packages still running and for how long. `make test` uses it:
//
//	testprogress [-every 15s] go test -race -count=1 ./...
//
// It adds -json to the go test command line and turns the events back into go test's text: a
// package's "ok", "FAIL" or "?" line as go test wrote it, the output of every failing test (as
// go test -v shows it), and a closing FAIL line when something failed, so the last lines are go
// test's own. Output of passing tests is dropped, as go test without -v drops it. It exits with go
// test's exit status.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// event is one line of go test -json (cmd/test2json's TestEvent, plus the build events).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testprogress", flag.ContinueOnError)
	fs.SetOutput(stderr)
	every := fs.Duration("every", 15*time.Second, "say which packages are still running after this long without output")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	i := slices.Index(argv, "test")
	if len(argv) < 2 || i < 0 {
		fmt.Fprintln(stderr, "usage: testprogress [-every 15s] go test [flags] [packages]")
		return 2
	}
	if !slices.Contains(argv, "-json") {
		argv = slices.Insert(slices.Clone(argv), i+1, "-json")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testprogress:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testprogress: cannot run %s: %v\n", strings.Join(argv, " "), err)
		return 2
	}
	// Ctrl-C reaches go test too (the whole process group gets it); keep reading until it has
	// printed what it has and exited, instead of dying first and cutting its output short.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt, syscall.SIGTERM)

	p := newPrinter(stdout, stderr)
	done := make(chan struct{})
	go p.heartbeat(*every, done)
	sc := bufio.NewScanner(events)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		p.line(sc.Bytes())
	}
	close(done)
	p.finish()
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(stderr, "testprogress:", err)
		return 2
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(stderr, "testprogress: reading go test's output:", err)
		return 2
	}
	return 0
}

// printer turns events back into go test's text. Its methods are called from the reading loop
// and the heartbeat, so it locks.
type printer struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	start, last    time.Time
	running        map[string]time.Time // package → when its test binary started
	pkgOut         map[string][]string  // package-level lines, printed when the package ends
	testOut        map[[2]string][]string
	failed         bool
}

func newPrinter(stdout, stderr io.Writer) *printer {
	now := time.Now()
	return &printer{stdout: stdout, stderr: stderr, start: now, last: now,
		running: map[string]time.Time{}, pkgOut: map[string][]string{}, testOut: map[[2]string][]string{}}
}

// framing are the lines go test -v adds around every test; go test without -v prints none.
var framing = []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"}

func (p *printer) line(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
		p.print(string(b) + "\n") // not an event: pass it on as it is
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(p.stderr, e.Output)
	case "build-fail":
		p.failed = true
	case "start":
		p.running[e.Package] = time.Now()
	case "output":
		if e.Test == "" {
			p.pkgOut[e.Package] = append(p.pkgOut[e.Package], e.Output)
			break
		}
		for _, f := range framing {
			if strings.HasPrefix(strings.TrimSpace(e.Output), f) {
				return
			}
		}
		k := [2]string{e.Package, e.Test}
		p.testOut[k] = append(p.testOut[k], e.Output)
	case "pass", "skip", "fail":
		if e.Test != "" {
			k := [2]string{e.Package, e.Test}
			if e.Action == "fail" {
				p.pkgOut[e.Package] = append(p.pkgOut[e.Package], p.testOut[k]...)
			}
			delete(p.testOut, k)
			break
		}
		p.endPackage(e.Package, e.Action == "fail")
	}
}

// endPackage prints a finished package's text: the output of its failed tests and its own lines
// (minus the PASS line that go test without -v leaves out), and, when it failed, whatever tests
// were still running when it ended (a panic or a timeout is in there).
func (p *printer) endPackage(pkg string, failed bool) {
	delete(p.running, pkg)
	var out []string
	if failed {
		p.failed = true
		var left [][2]string
		for k := range p.testOut {
			if k[0] == pkg {
				left = append(left, k)
			}
		}
		sort.Slice(left, func(i, j int) bool { return left[i][1] < left[j][1] })
		for _, k := range left {
			out = append(out, p.testOut[k]...)
		}
	}
	for k := range p.testOut {
		if k[0] == pkg {
			delete(p.testOut, k)
		}
	}
	for _, l := range p.pkgOut[pkg] {
		if !failed && l == "PASS\n" {
			continue
		}
		out = append(out, l)
	}
	delete(p.pkgOut, pkg)
	p.print(strings.Join(out, ""))
}

func (p *printer) print(s string) {
	if s == "" {
		return
	}
	fmt.Fprint(p.stdout, s)
	p.last = time.Now()
}

// finish prints what go test prints last when something failed.
func (p *printer) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A package that never reported its end (go test was interrupted) still shows its output.
	var left []string
	for pkg := range p.pkgOut {
		left = append(left, pkg)
	}
	sort.Strings(left)
	for _, pkg := range left {
		p.endPackage(pkg, true)
	}
	if p.failed {
		p.print("FAIL\n")
	}
}

// heartbeat says, after every quiet stretch of every, which packages are still running.
func (p *printer) heartbeat(every time.Duration, done <-chan struct{}) {
	t := time.NewTicker(every / 4)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			p.mu.Lock()
			if now.Sub(p.last) >= every {
				fmt.Fprintln(p.stderr, p.status(now))
				p.last = now
			}
			p.mu.Unlock()
		}
	}
}

func (p *printer) status(now time.Time) string {
	head := fmt.Sprintf("testprogress: %s in", round(now.Sub(p.start)))
	if len(p.running) == 0 {
		return head + ", building the test binaries"
	}
	pkgs := make([]string, 0, len(p.running))
	for pkg := range p.running {
		pkgs = append(pkgs, pkg)
	}
	sort.Slice(pkgs, func(i, j int) bool { return p.running[pkgs[i]].Before(p.running[pkgs[j]]) })
	parts := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		parts[i] = fmt.Sprintf("%s (%s)", pkg, round(now.Sub(p.running[pkg])))
	}
	return head + ", still running: " + strings.Join(parts, ", ")
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }
