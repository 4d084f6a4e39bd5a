//go:build citus

// The tests of scripts/citus.sh that need the Citus extension installed: `make citus` runs them
// when it starts its loopback cluster (build tag citus, so they are not part of `make test`).
package scripts

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCitusStartFailureStopsItsNodes: a start that fails on the third node (its port is taken)
// stops the two nodes it had started before it deletes their directory, so no server is left
// running on files that are gone.
func TestCitusStartFailureStopsItsNodes(t *testing.T) {
	// Three free ports in a row; the test holds the third, so the third node cannot listen.
	var base int
	var hold net.Listener
	for try := 0; hold == nil; try++ {
		if try == 50 {
			t.Fatal("found no three free consecutive loopback ports in 50 tries")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+2 > 65535 {
			continue
		}
		free := true
		for _, p := range []int{base, base + 1} {
			if c, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
				free = false
			} else {
				c.Close()
			}
		}
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+2)); free && err == nil {
			hold = l
		} else if err == nil {
			l.Close()
		}
	}
	defer hold.Close()

	parent, err := os.MkdirTemp("", "citus-start-fails-")
	if err != nil {
		t.Fatal(err)
	}
	// The postgres user (the servers' owner when the test runs as root) must reach the directory.
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(parent)
	dir := filepath.Join(parent, "cluster")

	cmd := exec.Command("bash", "citus.sh", "start", dir)
	cmd.Env = append(os.Environ(), "CITUS_PORT="+strconv.Itoa(base))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("citus.sh start did not end within 5 minutes; stderr:\n%s", stderr.String())
	}
	if err == nil {
		t.Fatalf("citus.sh start succeeded with port %d taken; stdout %q", base+2, stdout.String())
	}
	t.Logf("citus.sh start with port %d taken: %v\n%s", base+2, err, stderr.String())

	// Every server process started on DIR names it on its command line (-D DIR/PORT).
	left := processesNaming(t, dir)
	for _, pid := range left {
		// Stop what the script left behind, so a failing run does not leak servers: these are
		// the servers this test had the script start.
		syscall.Kill(pid, syscall.SIGQUIT)
	}
	if len(left) > 0 {
		t.Errorf("after the failed start, %d process(es) still run on %s (PIDs %v): the nodes it started were not stopped", len(left), dir, left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after the failed start %s still exists (stat: %v), want it deleted", dir, err)
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("port %d", base+2)) {
		t.Errorf("the failure does not name the node that failed (port %d):\n%s", base+2, stderr.String())
	}
	for _, p := range []int{base, base + 1} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still accepts connections after the failed start", p)
		}
	}
}

// processesNaming lists the PIDs of the processes whose command line contains s.
func processesNaming(t *testing.T, s string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
