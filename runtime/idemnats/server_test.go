package idemnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServer is a throwaway nats-server with JetStream, its store and its log in a fresh
// directory, on a loopback port it picked itself; it is stopped, by its PID, when the test ends.
type natsServer struct {
	URL string
	Dir string
	PID int
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	bin := natsProgram(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", "-1", "--ports_file_dir", dir,
		"-sd", filepath.Join(dir, "js"), "-l", filepath.Join(dir, "nats.log"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	s := &natsServer{Dir: dir, PID: cmd.Process.Pid}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("stop nats-server (PID %d): %v", s.PID, err)
			return
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("nats-server (PID %d) still runs 10s after SIGTERM", s.PID)
		}
	})

	// The server writes its port to nats-server_PID.ports once it listens.
	ports := filepath.Join(dir, "nats-server_"+strconv.Itoa(s.PID)+".ports")
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := os.ReadFile(ports)
		var p struct{ Nats []string }
		if err == nil && json.Unmarshal(raw, &p) == nil && len(p.Nats) > 0 {
			s.URL = p.Nats[0]
			break
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			t.Fatalf("nats-server exited before it listened: %v; its log:\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			t.Fatalf("nats-server did not write %s within 10s; its log:\n%s", ports, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// connect opens a client connection and a JetStream on it, closed when the test ends.
func (s *natsServer) connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to nats-server at %s: %v", s.URL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// natsProgram finds nats-server, installing it with the project's scripts/deps.sh when it is
// missing.
func natsProgram(t *testing.T) string {
	t.Helper()
	find := func() string {
		if p, err := exec.LookPath("nats-server"); err == nil {
			return p
		}
		for _, p := range []string{"/usr/sbin/nats-server", "/usr/bin/nats-server"} {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	deps := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "deps.sh")
	if out, err := exec.Command("bash", deps, "nats-server").CombinedOutput(); err != nil {
		t.Fatalf("nats-server is not installed and %s nats-server failed: %v\n%s", deps, err, out)
	}
	if p := find(); p != "" {
		return p
	}
	t.Fatalf("%s installed nats-server, but it is not on the PATH nor in /usr/sbin", deps)
	return ""
}

// stream creates a stream capturing subjects, and returns it.
func createStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return st
}
