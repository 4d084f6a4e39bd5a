package idemtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Operation describes one idempotent operation of an http.Handler for Conformance.
type Operation struct {
	Method string
	Path   string
	// Header is sent with every request (authentication, Content-Type, tenant).
	Header http.Header
	// Body is a valid request body; OtherBody a valid one that differs in a fingerprinted field
	// (nil skips the mismatch check).
	Body, OtherBody []byte
	// KeyHeader names the key header; default Idempotency-Key.
	KeyHeader string
	// MismatchStatus is the policy's status for a reused key; default 422.
	MismatchStatus int
	// Effects counts the operation's side effects so far (e.g. rows in its business table).
	Effects func(tb testing.TB) int
	// Concurrency is how many identical requests are fired at the same instant; default 16.
	Concurrency int
}

// Conformance checks that h answers op the way the HTTP contract (docs/runtime.md, README) promises a client: key-missing and
// key-invalid problems, a replay that repeats the first answer byte for byte with
// Idempotent-Replayed: true, the quoted key form, key-reused for a different request, and
// exactly one side effect for many identical requests sent at once. Each check is a subtest;
// they run one after another (they count side effects) with fresh random keys.
func Conformance(t *testing.T, h http.Handler, op Operation) {
	t.Helper()
	for _, c := range ConformanceChecks(h, op) {
		t.Run(c.Name, func(t *testing.T) { c.Run(t) })
	}
}

// Check is one named conformance check.
type Check struct {
	Name string
	Run  func(t testing.TB)
}

// ConformanceChecks returns Conformance's checks, for callers that run them their own way.
func ConformanceChecks(h http.Handler, op Operation) []Check {
	if op.Effects == nil {
		return []Check{{"operation", func(t testing.TB) {
			t.Fatal("idemtest: Operation.Effects is nil: give it a function that counts the operation's side effects")
		}}}
	}
	keyHeader := op.KeyHeader
	if keyHeader == "" {
		keyHeader = "Idempotency-Key"
	}
	mismatch := op.MismatchStatus
	if mismatch == 0 {
		mismatch = http.StatusUnprocessableEntity
	}
	n := op.Concurrency
	if n <= 0 {
		n = 16
	}
	send := func(body []byte, keys ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(op.Method, op.Path, bytes.NewReader(body))
		for k, vs := range op.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		for _, k := range keys {
			req.Header.Add(keyHeader, k)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}

	var checks []Check
	add := func(name string, run func(t testing.TB)) { checks = append(checks, Check{name, run}) }

	add("key-missing", func(t testing.TB) {
		before := op.Effects(t)
		checkProblem(t, send(op.Body), http.StatusBadRequest, idemhttp.CodeKeyMissing)
		checkEffects(t, op, before)
	})
	add("key-invalid", func(t testing.TB) {
		before := op.Effects(t)
		checkProblem(t, send(op.Body, newKey(), newKey()), http.StatusBadRequest, idemhttp.CodeKeyInvalid)
		checkProblem(t, send(op.Body, strings.Repeat("k", 256)), http.StatusBadRequest, idemhttp.CodeKeyInvalid)
		checkEffects(t, op, before)
	})
	add("replay", func(t testing.TB) {
		before := op.Effects(t)
		key := newKey()
		first := send(op.Body, key)
		if first.Header().Get(idemhttp.HeaderReplayed) != "" {
			t.Errorf("first answer carries %s", idemhttp.HeaderReplayed)
		}
		if isProblem(first) {
			t.Fatalf("first request answered a problem: %d %s", first.Code, first.Body)
		}
		checkEffects(t, op, before+1)
		for _, k := range []string{key, strconv.Quote(key)} {
			again := send(op.Body, k)
			if again.Code != first.Code || !bytes.Equal(again.Body.Bytes(), first.Body.Bytes()) {
				t.Errorf("retry with key %s answered %d %q; want the first answer %d %q", k, again.Code, again.Body, first.Code, first.Body)
			}
			if again.Header().Get(idemhttp.HeaderReplayed) != "true" {
				t.Errorf("retry with key %s lacks %s: true", k, idemhttp.HeaderReplayed)
			}
			if again.Header().Get("Set-Cookie") != "" {
				t.Errorf("replay carries Set-Cookie")
			}
		}
		checkEffects(t, op, before+1)
		if op.OtherBody != nil {
			checkProblem(t, send(op.OtherBody, key), mismatch, idemhttp.CodeKeyReused)
			checkEffects(t, op, before+1)
		}
	})
	add("concurrent duplicates", func(t testing.TB) {
		before := op.Effects(t)
		key := newKey()
		answers := make([]*httptest.ResponseRecorder, n)
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				answers[i] = send(op.Body, key)
			}()
		}
		ready.Wait()
		close(start)
		done.Wait()
		checkEffects(t, op, before+1)
		fresh := 0
		for _, a := range answers {
			switch {
			case a.Code == http.StatusConflict && isProblem(a):
				checkProblem(t, a, http.StatusConflict, idemhttp.CodeInProgress)
				if ra, err := strconv.Atoi(a.Header().Get("Retry-After")); err != nil || ra < 1 {
					t.Errorf("in-progress answer has Retry-After %q; want whole seconds >= 1", a.Header().Get("Retry-After"))
				}
			case isProblem(a):
				t.Errorf("a duplicate answered %d %s", a.Code, a.Body)
			case a.Header().Get(idemhttp.HeaderReplayed) == "":
				fresh++
			}
		}
		if fresh != 1 {
			t.Errorf("%d of %d identical requests were answered as fresh executions; want 1", fresh, n)
		}
	})
	return checks
}

func newKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "conformance-" + hex.EncodeToString(b[:])
}

func isProblem(w *httptest.ResponseRecorder) bool {
	return w.Header().Get("Content-Type") == idemwire.MediaTypeProblem
}

func checkEffects(t testing.TB, op Operation, want int) {
	t.Helper()
	if got := op.Effects(t); got != want {
		t.Errorf("%s %s: %d side effects; want %d", op.Method, op.Path, got, want)
	}
}

// checkProblem checks an RFC 9457 answer with idem's stable type and code.
func checkProblem(t testing.TB, w *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	var p idemhttp.Problem
	if w.Code != status || !isProblem(w) || json.Unmarshal(w.Body.Bytes(), &p) != nil {
		t.Errorf("answer %d %s %q; want a %d problem %s", w.Code, w.Header().Get("Content-Type"), w.Body, status, code)
		return
	}
	if p.Code != code || p.Type != idemhttp.ProblemTypePrefix+code || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v; want code %s, type %s%s, status %d, a title and a detail", p, code, idemhttp.ProblemTypePrefix, code, status)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("problem %s lacks Cache-Control: no-store", code)
	}
}
