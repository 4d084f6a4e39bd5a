// Package goldenhttp is what the golden cases' adapter tests share: a request to a generated
// server over real HTTP, the answer as the client saw it, its problem code, and row counts.
package goldenhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Answer is one response as the client saw it.
type Answer struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed reports whether the answer is marked as a replay.
func (a Answer) Replayed() bool { return a.Header.Get("Idempotent-Replayed") == "true" }

func (a Answer) String() string {
	return fmt.Sprintf("%d replayed=%v %s", a.Status, a.Replayed(), strings.TrimSpace(a.Body))
}

// Send sends one request with the given headers (added, so a name may repeat) and reads the
// whole answer.
func Send(t testing.TB, method, url, contentType, body string, header http.Header) Answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for name, values := range header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Answer{resp.StatusCode, resp.Header, string(b)}
}

// ProblemCode returns the code of a problem answer, and fails t when the answer is not
// application/problem+json.
func ProblemCode(t testing.TB, a Answer) string {
	t.Helper()
	if ct := a.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("problem Content-Type %q; body %s", ct, a.Body)
	}
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(a.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", a.Body, err)
	}
	return p.Code
}

// Count returns the number of rows in table.
func Count(t testing.TB, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
