package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
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
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/payments").CombinedOutput(); err != nil {
		t.Fatalf("go build the payments example: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0")
	const webhookSecret = "whsec_ZGVtby10ZXN0LXdlYmhvb2stc2VjcmV0"
	srv.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "BANK_WEBHOOK_SECRETS="+webhookSecret)
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
	if err := run(ctx, []string{"-url", "http://" + addr, "-database-url", dbURL, "-bank-webhook-secret", webhookSecret}, &out); err != nil {
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
		"The retry got the stored 201 replayed, its body byte for byte identical to the first answer.",
		"Every key ran its handler once: no retry was executed twice.",
		"→ 202 Accepted, Location: /v1/payouts/po_",
		"→ 202 Accepted, Idempotent-Replayed: true, Location: /v1/payouts/po_",
		`"status":"pending"`,
		"The status turned succeeded; a retry now still gets the first 202 and Location",
		"The bank holds one charge for it",
		`idemgen_idempotency_events_total{event="replayed",operation="createPayment"}`,
		"The redelivery (signed anew, same webhook-id) got the stored 200; the event has 1 row: one effect.",
		"→ 401 Unauthorized",
		"problem signature-invalid",
		"no row, no key.",
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, transcript)
		}
	}
	// The closing table: what the database holds, next to what the requests should have left.
	for _, row := range []string{
		`payments\s+2\s+2 ok\s+8 creates: 3 with one key and body, 2 with another key, 3 refused \(422, 400, 401\)`,
		`ledger: authorizations\s+2\s+2 ok`,
		`ledger: captures\s+1\s+1 ok`,
		`refunds\s+1\s+1 ok`,
		`ledger: refunds\s+1\s+1 ok`,
	} {
		if !regexp.MustCompile(`(?m)^  ` + row).MatchString(transcript) {
			t.Errorf("the closing table has no row matching %q:\n%s", row, transcript)
		}
	}
	// Step 1 says what this run showed, and the status lines above it agree.
	inProgress := strings.Contains(transcript, "was still running and got 409 in-progress:")
	replayed := strings.Contains(transcript, "had finished and got the stored 201 replayed:")
	switch {
	case inProgress == replayed:
		t.Errorf("step 1 says neither or both of 'got 409 in-progress' and 'got the stored 201 replayed':\n%s", transcript)
	case inProgress && !strings.Contains(transcript, "→ 409 Conflict, Retry-After:"):
		t.Errorf("step 1 says 409 in-progress, but no request got a 409 with Retry-After:\n%s", transcript)
	case replayed && strings.Count(transcript, "→ 201 Created, Idempotent-Replayed: true") < 2:
		t.Errorf("step 1 says B got the stored 201 replayed, but fewer than two requests (B and the retry of step 2) got a replay:\n%s", transcript)
	}
	if strings.Contains(transcript, "UNEXPECTED") {
		t.Errorf("the transcript reports something unexpected:\n%s", transcript)
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("server log:\n%s", log.String())
	}
}

// TestDoubleClickSaysWhatHappened: step 1 names who created the payment and what the other
// request got, in each way a double click can end, and flags what must never happen.
func TestDoubleClickSaysWhatHappened(t *testing.T) {
	t.Parallel()
	created := func() *call { return &call{status: 201, header: http.Header{}, resp: []byte(`{"payment_id":"pay_1"}`)} }
	replay := func() *call {
		return &call{status: 201, header: http.Header{"Idempotent-Replayed": {"true"}}, resp: []byte(`{"payment_id":"pay_1"}`)}
	}
	busy := func() *call {
		return &call{status: 409, header: http.Header{"Retry-After": {"1"}}, resp: []byte(`{"code":"in-progress"}`)}
	}
	for _, tc := range []struct {
		name       string
		a, b       *call
		creator    string // "A", "B" or "" for none
		say        string
		unexpected bool
	}{
		{"B in progress", created(), busy(), "A", "A created the payment. B arrived while A was still running and got 409 in-progress:\n   it did not run, and may retry after Retry-After: 1s to get the stored answer.\n", false},
		{"A in progress", busy(), created(), "B", "B created the payment. A arrived while B was still running and got 409 in-progress:\n", false},
		{"B replayed", created(), replay(), "A", "A created the payment. B came a moment after A had finished and got the stored 201 replayed:\n   it did not run again.\n", false},
		{"both ran", created(), created(), "A", "UNEXPECTED: both requests created a payment", true},
		{"neither ran", busy(), busy(), "", "UNEXPECTED: neither request created the payment (A: 409, B: 409)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			d := &demo{out: &out}
			first := d.doubleClick(tc.a, tc.b)
			switch {
			case tc.creator == "" && first != nil, tc.creator == "A" && first != tc.a, tc.creator == "B" && first != tc.b:
				t.Errorf("doubleClick returned the wrong creator, want %q", tc.creator)
			}
			if !strings.Contains(out.String(), tc.say) {
				t.Errorf("it says\n%s\nwant it to contain\n%s", out.String(), tc.say)
			}
			if got := len(d.unexpected) > 0; got != tc.unexpected {
				t.Errorf("recorded as unexpected: %v, want %v (%q)", got, tc.unexpected, d.unexpected)
			}
		})
	}
}
