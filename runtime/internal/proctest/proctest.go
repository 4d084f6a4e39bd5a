// Package proctest runs the child processes of a storm test: copies of the test binary that
// serve as consumers or workers, each reporting on its stdout, which the test kills by PID at
// the points they report and replaces. It signals only the processes it started.
package proctest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Fleet is a storm's child processes.
type Fleet struct {
	t      testing.TB
	name   string   // "consumer", "worker": in messages and log file names
	env    []string // added to the test's environment, which makes the binary a child
	line   func(string)
	logDir string

	// Kills receives the PID of each child that printed a line starting "kill ": it waits to be
	// killed there.
	Kills chan int

	mu      sync.Mutex
	procs   map[int]*child
	started int
}

type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// New is a fleet of name processes, each the test binary with env added, whose stdout lines
// go to line (from one goroutine per child). The children still running when t ends are
// killed.
func New(t testing.TB, name string, env []string, line func(string)) *Fleet {
	f := &Fleet{t: t, name: name, env: env, line: line, logDir: t.TempDir(), Kills: make(chan int, 64), procs: map[int]*child{}}
	t.Cleanup(func() {
		f.mu.Lock()
		pids := make([]int, 0, len(f.procs))
		for pid := range f.procs {
			pids = append(pids, pid)
		}
		f.mu.Unlock()
		for _, pid := range pids {
			f.Kill(pid)
		}
	})
	return f
}

// Start starts one more child; its stderr goes to a log file in the test's temporary directory.
func (f *Fleet) Start() {
	f.mu.Lock()
	n := f.started
	f.started++
	f.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), f.env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(f.logDir, fmt.Sprintf("%s-%d.log", f.name, n)))
	if err != nil {
		f.t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		f.t.Fatalf("start a %s process: %v", f.name, err)
	}
	c := &child{cmd: cmd, exited: make(chan struct{})}
	pid := cmd.Process.Pid
	f.mu.Lock()
	f.procs[pid] = c
	f.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f.line(sc.Text())
			if strings.HasPrefix(sc.Text(), "kill ") {
				f.Kills <- pid
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
}

// Kill kills the child pid with SIGKILL and waits for it to exit; a PID the fleet no longer
// runs is left alone.
func (f *Fleet) Kill(pid int) {
	f.mu.Lock()
	c := f.procs[pid]
	delete(f.procs, pid)
	f.mu.Unlock()
	if c == nil {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		f.t.Errorf("kill %s %d: %v", f.name, pid, err)
	}
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		f.t.Errorf("%s %d still runs 10s after SIGKILL", f.name, pid)
	}
}

// Started is how many children the fleet has started.
func (f *Fleet) Started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started
}

// StderrTails are the last 2,000 bytes of each child's stderr, for a failure message.
func (f *Fleet) StderrTails() string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(f.logDir, "*.log"))
	for _, l := range logs {
		if data, err := os.ReadFile(l); err == nil && len(data) > 0 {
			if len(data) > 2000 {
				data = data[len(data)-2000:]
			}
			fmt.Fprintf(&b, "\n--- %s:\n%s", filepath.Base(l), data)
		}
	}
	return b.String()
}
