package payments

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// syncBuffer is a bytes.Buffer that the server's log and the test read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClaimFlag: main's -claim flag (and CLAIM_MODE without it) picks the claim mode the
// example serves its API in; both serve a payment once; a value that is no mode is a usage error.
func TestClaimFlag(t *testing.T) {
	var usage usageError
	if err := run(context.Background(), []string{"-claim", "eventually"}, &bytes.Buffer{}); !errors.As(err, &usage) ||
		!strings.Contains(err.Error(), `claim mode "eventually": want lease`) {
		t.Errorf("-claim eventually: %v, want a usage error naming the modes", err)
	}
	for _, c := range []struct{ name, flag, env, want string }{
		{"default", "", "", "lease"},
		{"flag", "transaction", "", "transaction"},
		{"environment", "", "transaction", "transaction"},
		{"flag over environment", "lease", "transaction", "lease"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(claimModeEnv, c.env)
			schema := idemtest.TestSchema(t, nil)
			sep := "?"
			if strings.Contains(schema.URL, "?") {
				sep = "&"
			}
			args := []string{"-addr", "127.0.0.1:0", "-database-url", schema.URL + sep + "search_path=" + schema.Name}
			if c.flag != "" {
				args = append(args, "-claim", c.flag)
			}
			ctx, cancel := context.WithCancel(context.Background())
			logs := &syncBuffer{}
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, logs) }()
			defer func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("run: %v", err)
					}
				case <-time.After(30 * time.Second):
					t.Error("the server did not stop within 30s of its context ending")
				}
			}()
			var m []string
			for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(50 * time.Millisecond) {
				select {
				case err := <-done:
					done <- err // for the deferred check
					t.Fatalf("the server stopped before it listened: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the server did not log its address within 30s; log:\n%s", logs.String())
				}
				m = regexp.MustCompile(`msg=listening addr=(\S+) .*claim=(\S+)`).FindStringSubmatch(logs.String())
			}
			if m[2] != c.want {
				t.Errorf("the server serves claim mode %s, want %s", m[2], c.want)
			}
			for i := range 2 {
				req, _ := http.NewRequest(http.MethodPost, "http://"+m[1]+"/v1/payments", strings.NewReader(`{"amount_minor": 500, "currency": "EUR"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "claim-flag")
				req.Header.Set("X-Tenant-ID", "acme")
				resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || (i == 1) != (resp.Header.Get("Idempotent-Replayed") == "true") {
					t.Errorf("request %d: %d (replayed %q), want 201, the second one replayed", i+1, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
				}
			}
			var n int
			if err := schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM payments`).Scan(&n); err != nil || n != 1 {
				t.Errorf("%d payments (%v), want 1", n, err)
			}
		})
	}
}
