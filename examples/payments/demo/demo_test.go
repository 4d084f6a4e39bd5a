package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestDemo runs what `make demo` runs: the built payments server, then this driver against it,
// on a schema of the test's own, and checks the transcript says what the demo promises.
func TestDemo(t *testing.T) {
	t.Parallel()
	s := idemtest.TestSchema(t, &idemtest.SchemaOpts{NoMigrate: true}) // the server migrates itself
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", s.Name) // pgx passes unknown URL parameters to the server as settings
	u.RawQuery = q.Encode()
	dbURL := u.String()

	bin := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build the payments example: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0")
	srv.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	srv.Cancel = func() error { return srv.Process.Signal(syscall.SIGTERM) }
	stderr, err := srv.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	addrc := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		listening := regexp.MustCompile(`msg=listening addr=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = srv.Process.Signal(syscall.SIGTERM)
		<-logDone
		if err := srv.Wait(); err != nil {
			t.Errorf("payments server: %v\n%s", err, log.String())
		}
	}
	defer stop()

	var addr string
	select {
	case addr = <-addrc:
	case <-logDone:
		t.Fatalf("the server exited before listening:\n%s", log.String())
	case <-ctx.Done():
		t.Fatal("the server did not listen within 60s")
	}

	var out bytes.Buffer
	if err := run(ctx, []string{"-url", "http://" + addr, "-database-url", dbURL}, &out); err != nil {
		t.Fatalf("demo: %v\ntranscript:\n%s", err, out.String())
	}
	stop()
	transcript := out.String()
	for _, want := range []string{
		"→ 201 Created, Idempotent-Replayed: true",
		"byte for byte identical to the first answer",
		"→ 422 Unprocessable Entity",
		"problem key-reused",
		"→ 400 Bad Request",
		"problem key-missing",
		"→ 401 Unauthorized",
		"→ 500 Internal Server Error",
		`"amount_refunded_minor":5000`,
		`"status":"succeeded"`,
		": 2 payment(s), 1 refund(s); ledger: 2 authorization(s), 1 capture(s), 1 refund(s).",
		`idemgen_idempotency_events_total{event="replayed",operation="createPayment"}`,
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, transcript)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("server log:\n%s", log.String())
	}
}
