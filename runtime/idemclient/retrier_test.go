package idemclient_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemclient"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// returnBound is how long any call of these tests may take before it counts as hung.
const returnBound = 20 * time.Second

// server answers the attempts of one test with answer, in order (the last repeats), and keeps
// what each attempt sent.
type server struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	keys   []string
	bodies [][]byte
}

func newServer(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *server {
	s := &server{t: t}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.bodies = append(s.bodies, b)
		n := len(s.keys)
		s.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func writeProblem(w http.ResponseWriter, status int, code, retryAfter string) {
	h, body := problem(status, code)
	for k, v := range h {
		w.Header()[k] = v
	}
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func created(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"pay_1"}`))
}

// hangUp drops the connection without an answer, as a crash or a cut cable does.
func hangUp(w http.ResponseWriter) {
	c, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

var op = &idemclient.Operation{Route: "POST /v1/payments", KeyHeader: "Idempotency-Key"}

func (s *server) send(ctx context.Context, body io.Reader, edit func(context.Context, *http.Request) error) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+"/v1/payments", body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := edit(ctx, req); err != nil {
		return nil, err
	}
	return s.srv.Client().Do(req)
}

func fast(o idemclient.Options) *idemclient.Retrier {
	o.BackoffBase = cmpOr(o.BackoffBase, time.Millisecond)
	o.BackoffCap = cmpOr(o.BackoffCap, 5*time.Millisecond)
	r, err := idemclient.New(&o)
	if err != nil {
		panic(err)
	}
	return r
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

type callResult struct {
	resp *http.Response
	err  error
}

// call runs Do and fails the test when it does not return within returnBound.
func call(t *testing.T, ctx context.Context, r *idemclient.Retrier, req idemclient.Request, opts ...idemclient.CallOption) (*http.Response, error) {
	t.Helper()
	done := make(chan callResult, 1)
	go func() {
		resp, err := r.Do(ctx, op, req, opts...)
		done <- callResult{resp, err}
	}()
	select {
	case c := <-done:
		return c.resp, c.err
	case <-time.After(returnBound):
		t.Fatalf("Do did not return within %s", returnBound)
		return nil, nil
	}
}

func TestSameKeyAndBodyOnEveryAttempt(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			hangUp(w)
		case 2:
			writeProblem(w, 503, idemhttp.CodeStoreUnavailable, "")
		case 3:
			writeProblem(w, 500, idemhttp.CodeInternal, "")
		default:
			created(w)
		}
	})
	var retries []string
	r := fast(idemclient.Options{OnRetry: func(attempt int, reason string, wait time.Duration) { retries = append(retries, reason) }})
	var res idemclient.Result
	resp, err := call(t, context.Background(), r, idemclient.Request{Body: strings.NewReader(`{"amount_minor":1990}`), Send: s.send}, idemclient.WithResult(&res))
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("Do: %v, %v; want the 201", resp, err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != `{"id":"pay_1"}` {
		t.Errorf("final body %q, want the server's", b)
	}
	if res.Attempts != 4 || s.attempts() != 4 || res.Replayed || res.Status != 201 {
		t.Errorf("result %+v, server saw %d attempts; want 4 attempts, not replayed, 201", res, s.attempts())
	}
	for i, k := range s.keys {
		if k != res.Key || k == "" {
			t.Errorf("attempt %d sent key %q, want the call's one key %q", i+1, k, res.Key)
		}
		if string(s.bodies[i]) != `{"amount_minor":1990}` {
			t.Errorf("attempt %d sent body %q, want the same bytes every time", i+1, s.bodies[i])
		}
	}
	if len(retries) != 3 || !strings.HasPrefix(retries[0], "transport error") || retries[1] != "503 store-unavailable" || retries[2] != "500 internal" {
		t.Errorf("OnRetry reasons %q", retries)
	}

	// A second call is a new operation: a new key.
	if _, err := call(t, context.Background(), r, idemclient.Request{Send: s.send}, idemclient.WithResult(&res)); err != nil {
		t.Fatal(err)
	}
	if res.Key == s.keys[0] {
		t.Errorf("a second call reused the first call's key %q", res.Key)
	}
}

func TestKeySources(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) { created(w) })
	r := fast(idemclient.Options{KeyFunc: func() (string, error) { return "from-keyfunc", nil }})
	for _, c := range []struct {
		name string
		req  idemclient.Request
		opts []idemclient.CallOption
		want string
	}{
		{"KeyFunc", idemclient.Request{Send: s.send}, nil, "from-keyfunc"},
		{"the params' key", idemclient.Request{Send: s.send, Key: "from-params"}, nil, "from-params"},
		{"WithKey wins", idemclient.Request{Send: s.send, Key: "from-params"}, []idemclient.CallOption{idemclient.WithKey("cart-42")}, "cart-42"},
	} {
		n := s.attempts()
		if _, err := call(t, context.Background(), r, c.req, c.opts...); err != nil {
			t.Fatal(err)
		}
		if got := s.keys[n]; got != c.want {
			t.Errorf("%s: sent key %q, want %q", c.name, got, c.want)
		}
	}
	// A key header the request already carries (oapi-codegen sets it from the typed params)
	// is the caller's key, on every attempt.
	flaky := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			hangUp(w)
			return
		}
		created(w)
	})
	withHeader := func(ctx context.Context, body io.Reader, edit func(context.Context, *http.Request) error) (*http.Response, error) {
		return flaky.send(ctx, body, func(ctx context.Context, req *http.Request) error {
			req.Header.Set("Idempotency-Key", "from-the-params")
			return edit(ctx, req)
		})
	}
	var res idemclient.Result
	if _, err := call(t, context.Background(), r, idemclient.Request{Send: withHeader}, idemclient.WithResult(&res)); err != nil {
		t.Fatal(err)
	}
	if res.Key != "from-the-params" || len(flaky.keys) != 2 || flaky.keys[0] != "from-the-params" || flaky.keys[1] != "from-the-params" {
		t.Errorf("keys sent %q (result %q); want the request's own key on both attempts", flaky.keys, res.Key)
	}

	// A path key: no header at all.
	pathOp := &idemclient.Operation{Route: "PUT /carts/{id}"}
	n := s.attempts()
	if _, err := r.Do(context.Background(), pathOp, idemclient.Request{Send: s.send}); err != nil {
		t.Fatal(err)
	}
	if s.keys[n] != "" {
		t.Errorf("a path-key operation sent Idempotency-Key %q, want none", s.keys[n])
	}
}

// TestAlways409StopsAtTheDeadline: a server stuck in progress is retried after each
// Retry-After until the next wait would pass the context's deadline; then a clear error.
func TestAlways409StopsAtTheDeadline(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, 409, idemhttp.CodeInProgress, "1")
	})
	r := fast(idemclient.Options{MaxAttempts: 1000})
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	resp, err := call(t, ctx, r, idemclient.Request{Send: s.send})
	var gu *idemclient.GiveUpError
	if resp != nil || !errors.As(err, &gu) {
		t.Fatalf("Do: %v, %v; want a *GiveUpError", resp, err)
	}
	if !errors.Is(err, idemclient.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not match ErrDeadline and context.DeadlineExceeded", err)
	}
	var last *idemclient.Error
	if !errors.As(err, &last) || last.Code != idemclient.CodeInProgress {
		t.Errorf("error %v does not carry the last 409 in-progress", err)
	}
	if gu.Key == "" || !strings.Contains(err.Error(), gu.Key) || !strings.Contains(err.Error(), "the context's deadline") {
		t.Errorf("message %q does not name the key and the deadline", err)
	}
	if s.attempts() < 2 || s.attempts() > 3 {
		t.Errorf("%d attempts in 2.5s with Retry-After: 1; want 2 or 3 (never sooner than Retry-After)", s.attempts())
	}

	// Without a context deadline, MaxElapsed bounds the call.
	r = fast(idemclient.Options{MaxAttempts: 1000, MaxElapsed: 1500 * time.Millisecond})
	_, err = call(t, context.Background(), r, idemclient.Request{Send: s.send})
	if !errors.Is(err, idemclient.ErrDeadline) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "MaxElapsed") {
		t.Errorf("error %v; want ErrDeadline naming MaxElapsed", err)
	}
}

func TestRetryAfterHostile(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, value string
		giveUp      bool
	}{
		{"absent", "", false},
		{"zero", "0", false},
		{"malformed", "soon", false},
		{"negative", "-3", false},
		{"a date in the past", "Mon, 02 Jan 2006 15:04:05 GMT", false},
		{"huge", "99999999999", true},
		{"a date far ahead", "Fri, 31 Dec 9999 23:59:59 GMT", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					writeProblem(w, 503, idemhttp.CodeStoreUnavailable, c.value)
					return
				}
				created(w)
			})
			var waits []time.Duration
			r := fast(idemclient.Options{OnRetry: func(_ int, _ string, wait time.Duration) { waits = append(waits, wait) }})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := call(t, ctx, r, idemclient.Request{Send: s.send})
			if c.giveUp {
				if !errors.Is(err, idemclient.ErrDeadline) || s.attempts() != 1 || len(waits) != 0 {
					t.Errorf("Do: %v after %d attempts (waits %v); want ErrDeadline at once, without waiting", err, s.attempts(), waits)
				}
				return
			}
			if err != nil || resp.StatusCode != 201 || s.attempts() != 2 {
				t.Fatalf("Do: %v, %v after %d attempts; want the 201 on the second", resp, err, s.attempts())
			}
			if len(waits) != 1 || waits[0] > 5*time.Millisecond {
				t.Errorf("waits %v; want one, from the backoff (≤ BackoffCap 5ms)", waits)
			}
		})
	}
}

// onceReader fails a second read after EOF, as a network stream or a pipe cannot be read twice.
type onceReader struct {
	r   io.Reader
	eof bool
}

func (o *onceReader) Read(p []byte) (int, error) {
	if o.eof {
		return 0, errors.New("onceReader: read after EOF")
	}
	n, err := o.r.Read(p)
	if err == io.EOF {
		o.eof = true
	}
	return n, err
}

func TestBodyReadOnceIsBuffered(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n < 3 {
			hangUp(w)
			return
		}
		created(w)
	})
	body := bytes.Repeat([]byte("0123456789"), 10_000)
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write(body); _ = pw.Close() }()
	resp, err := call(t, context.Background(), fast(idemclient.Options{}), idemclient.Request{Body: &onceReader{r: pr}, Send: s.send})
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("Do: %v, %v", resp, err)
	}
	for i, b := range s.bodies {
		if !bytes.Equal(b, body) {
			t.Errorf("attempt %d sent %d bytes, want the same %d bytes each time", i+1, len(b), len(body))
		}
	}
}

func TestBodyTooLargeFailsBeforeSending(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) { created(w) })
	_, err := call(t, context.Background(), fast(idemclient.Options{MaxBodyBytes: 10}), idemclient.Request{Body: strings.NewReader("01234567890"), Send: s.send})
	if !errors.Is(err, idemclient.ErrBodyTooLarge) || s.attempts() != 0 {
		t.Errorf("Do: %v, %d attempts; want ErrBodyTooLarge before any attempt", err, s.attempts())
	}
	if _, err := call(t, context.Background(), fast(idemclient.Options{MaxBodyBytes: 10}), idemclient.Request{Body: strings.NewReader("0123456789"), Send: s.send}); err != nil {
		t.Errorf("a body of exactly MaxBodyBytes: %v", err)
	}
}

// TestCancelDuringWait: a context cancelled while the call waits for Retry-After ends the call
// at once, not when the wait would have ended.
func TestCancelDuringWait(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, 409, idemhttp.CodeInProgress, "600")
	})
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan time.Duration, 1)
	r := fast(idemclient.Options{MaxElapsed: time.Hour, OnRetry: func(_ int, _ string, wait time.Duration) { waiting <- wait }})
	done := make(chan error, 1)
	go func() {
		_, err := r.Do(ctx, op, idemclient.Request{Send: s.send})
		done <- err
	}()
	select {
	case w := <-waiting:
		if w < 600*time.Second {
			t.Errorf("wait %s, want at least the Retry-After of 600s", w)
		}
	case <-time.After(returnBound):
		t.Fatal("the call never started waiting")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Do: %v, want context.Canceled", err)
		}
	case <-time.After(returnBound):
		t.Fatal("Do did not return after its context was cancelled during a 600s wait")
	}
}

func TestNeverRetried(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status int
		code   string
	}{{400, idemhttp.CodeKeyMissing}, {422, idemhttp.CodeKeyReused}, {401, ""}, {403, ""}, {404, ""}, {413, idemhttp.CodeBodyTooLarge}, {415, idemhttp.CodeMediaTypeUnsupported}, {402, ""}} {
		s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if c.code != "" {
				writeProblem(w, c.status, c.code, "1")
				return
			}
			w.WriteHeader(c.status)
		})
		resp, err := call(t, context.Background(), fast(idemclient.Options{}), idemclient.Request{Send: s.send})
		var e *idemclient.Error
		if resp == nil || resp.StatusCode != c.status || !errors.As(err, &e) || e.Status != c.status || e.Code != c.code || s.attempts() != 1 {
			t.Errorf("%d %s: Do = %v, %v after %d attempts; want the answer and an *Error, once", c.status, c.code, resp, err, s.attempts())
		}
		if got := errors.Is(err, idemclient.ErrKeyReused); got != (c.code == idemhttp.CodeKeyReused) {
			t.Errorf("%d %s: errors.Is(err, ErrKeyReused) = %v", c.status, c.code, got)
		}
	}
}

// TestOperationUncertainIsFinal: the runtime's own 409 operation-uncertain (idem.ErrUncertain as
// idemhttp writes it) ends the call at the first answer, never retried, with an *Error that
// matches ErrOperationUncertain and not ErrKeyReused, and whose text says to keep the key.
func TestOperationUncertainIsFinal(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		_ = idemhttp.ErrorProblem(idem.ErrUncertain).WriteTo(w)
	})
	resp, err := call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 5}), idemclient.Request{Send: s.send})
	var e *idemclient.Error
	if resp == nil || resp.StatusCode != http.StatusConflict || !errors.As(err, &e) || e.Code != idemclient.CodeOperationUncertain {
		t.Fatalf("Do = %v, %v; want the 409 and an *Error with code operation-uncertain", resp, err)
	}
	if n := s.attempts(); n != 1 {
		t.Errorf("the server saw %d attempts; want 1: operation-uncertain is final", n)
	}
	if !errors.Is(err, idemclient.ErrOperationUncertain) || errors.Is(err, idemclient.ErrKeyReused) {
		t.Errorf("errors.Is(err, ErrOperationUncertain) = %v, errors.Is(err, ErrKeyReused) = %v; want true, false",
			errors.Is(err, idemclient.ErrOperationUncertain), errors.Is(err, idemclient.ErrKeyReused))
	}
	if !strings.Contains(err.Error(), "same key") {
		t.Errorf("error %q does not tell the caller to keep the key", err)
	}
}

func TestReplayedAndExhausted(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotent-Replayed", "true")
		created(w)
	})
	var res idemclient.Result
	if _, err := call(t, context.Background(), fast(idemclient.Options{}), idemclient.Request{Send: s.send}, idemclient.WithResult(&res)); err != nil || !res.Replayed || res.Attempts != 1 {
		t.Errorf("replay: %v, %+v; want Replayed after 1 attempt", err, res)
	}

	s = newServer(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) })
	_, err := call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 3}), idemclient.Request{Send: s.send}, idemclient.WithResult(&res))
	if !errors.Is(err, idemclient.ErrAttemptsExhausted) || s.attempts() != 3 || res.Attempts != 3 {
		t.Errorf("always 500: %v after %d attempts; want ErrAttemptsExhausted after 3", err, s.attempts())
	}
}

// TestUnreachableAttemptsDoNotCount: while the server cannot be reached (connections refused,
// a gateway's 502/503/504, the key's orphaned holder answering 409 in-progress), attempts do
// not count toward MaxAttempts: the call lasts until MaxElapsed, and succeeds when the server
// comes back after more than MaxAttempts such attempts.
func TestUnreachableAttemptsDoNotCount(t *testing.T) {
	t.Parallel()
	// A gateway with nothing behind it, then the orphan's lease, then the server.
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch {
		case n <= 4:
			w.WriteHeader(502 + n%3) // 503, 504, 502, 503
		case n <= 8:
			writeProblem(w, 409, idemhttp.CodeInProgress, "")
		default:
			created(w)
		}
	})
	var res idemclient.Result
	resp, err := call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 2}), idemclient.Request{Send: s.send}, idemclient.WithResult(&res))
	if err != nil || resp.StatusCode != 201 || res.Attempts != 9 {
		t.Errorf("gateway errors and in-progress with MaxAttempts 2: %v, %+v; want the 201 on attempt 9", err, res)
	}

	// A server that is down: every connection refused. Only MaxElapsed ends the call.
	ln := httptest.NewServer(http.NotFoundHandler())
	url := ln.URL
	ln.Close()
	refused := func(ctx context.Context, body io.Reader, edit func(context.Context, *http.Request) error) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
		if err != nil {
			return nil, err
		}
		if err := edit(ctx, req); err != nil {
			return nil, err
		}
		return http.DefaultClient.Do(req)
	}
	start := time.Now()
	_, err = call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 3, MaxElapsed: 700 * time.Millisecond}), idemclient.Request{Send: refused}, idemclient.WithResult(&res))
	if !errors.Is(err, idemclient.ErrDeadline) || res.Attempts <= 3 || !strings.Contains(err.Error(), "MaxElapsed") {
		t.Errorf("server down: %v after %d attempts; want ErrDeadline at MaxElapsed, after more than MaxAttempts (3) attempts", err, res.Attempts)
	}
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Errorf("server down: the call ended after %s, want it to last until about MaxElapsed (700ms)", el)
	}

	// MaxAttempts 1 turns retries off, whatever the answer.
	_, err = call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 1}), idemclient.Request{Send: refused}, idemclient.WithResult(&res))
	if !errors.Is(err, idemclient.ErrAttemptsExhausted) || res.Attempts != 1 {
		t.Errorf("server down, MaxAttempts 1: %v after %d attempts; want ErrAttemptsExhausted after 1", err, res.Attempts)
	}
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-r.Context().Done() // a server that never answers this attempt
			return
		}
		created(w)
	})
	var reasons []string
	r := fast(idemclient.Options{AttemptTimeout: 100 * time.Millisecond, OnRetry: func(_ int, reason string, _ time.Duration) { reasons = append(reasons, reason) }})
	resp, err := call(t, context.Background(), r, idemclient.Request{Send: s.send})
	if err != nil || resp.StatusCode != 201 || len(reasons) != 1 || !strings.Contains(reasons[0], "timed out") {
		t.Errorf("Do: %v, %v, retries %q; want the 201 after one timed-out attempt", resp, err, reasons)
	}
}

func TestBuildErrorIsFinal(t *testing.T) {
	t.Parallel()
	n := 0
	_, err := fast(idemclient.Options{}).Do(context.Background(), op, idemclient.Request{Send: func(context.Context, io.Reader, func(context.Context, *http.Request) error) (*http.Response, error) {
		n++
		return nil, errors.New("bad parameter")
	}})
	if err == nil || n != 1 || !strings.Contains(err.Error(), "building the request") {
		t.Errorf("Do: %v after %d sends; want one, a building error", err, n)
	}
}

// TestAnAttemptEndsAtMaxElapsed: MaxElapsed bounds the attempt in flight, not only the waits
// between attempts: a server that holds a request without answering (a handler stuck on a lock)
// cannot keep a call past MaxElapsed, even with an AttemptTimeout far longer. The call gives up
// naming MaxElapsed and the key, and the server sees the request abandoned.
func TestAnAttemptEndsAtMaxElapsed(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	abandoned := make(chan int, 4)
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeProblem(w, 500, idemhttp.CodeInternal, "") // retried at once
			return
		}
		select {
		case <-r.Context().Done():
			abandoned <- n
		case <-stop:
		}
	})
	t.Cleanup(func() { close(stop) }) // before the server's Close, which waits for its handlers
	var res idemclient.Result
	r := fast(idemclient.Options{MaxElapsed: 800 * time.Millisecond, AttemptTimeout: time.Hour})
	resp, err := call(t, context.Background(), r, idemclient.Request{Send: s.send}, idemclient.WithResult(&res))
	var gu *idemclient.GiveUpError
	if resp != nil || !errors.As(err, &gu) || !errors.Is(err, idemclient.ErrDeadline) || !strings.Contains(err.Error(), "MaxElapsed") {
		t.Fatalf("Do: %v, %v; want a *GiveUpError at MaxElapsed", resp, err)
	}
	if gu.Key == "" || gu.Key != res.Key || res.Attempts != 2 {
		t.Errorf("gave up with key %q after %d attempts (result %+v); want the call's key after 2", gu.Key, res.Attempts, res)
	}
	select {
	case n := <-abandoned:
		if n != 2 {
			t.Errorf("attempt %d was abandoned, want the second", n)
		}
	case <-time.After(returnBound):
		t.Errorf("the server did not see the held attempt abandoned within %s", returnBound)
	}
}

// TestGivesUpOnTheAPIsOwn409InProgress: a server whose refusals are the API's own error format
// (not problem+json) keeps answering 409 with Idempotency-Refusal: in-progress: the call waits
// it out and, at MaxElapsed, returns the *GiveUpError a caller checks for, naming the key, with
// the last 409 as an *Error of code in-progress; never the 409 as if it were final.
func TestGivesUpOnTheAPIsOwn409InProgress(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set(idemclient.HeaderRefusal, idemclient.CodeInProgress)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"Code":"409","Message":"in progress","Errors":[{"ErrorCode":"UK.OBIE.Resource.InvalidConsentStatus","Message":"retry later"}]}`))
	})
	var res idemclient.Result
	resp, err := call(t, context.Background(), fast(idemclient.Options{MaxAttempts: 2, MaxElapsed: 2500 * time.Millisecond}), idemclient.Request{Send: s.send}, idemclient.WithResult(&res))
	var gu *idemclient.GiveUpError
	var last *idemclient.Error
	if resp != nil || !errors.As(err, &gu) || !errors.As(err, &last) || last.Code != idemclient.CodeInProgress || last.Status != http.StatusConflict {
		t.Fatalf("Do: %v, %v; want a *GiveUpError whose last attempt is the 409 in-progress", resp, err)
	}
	if gu.Key == "" || gu.Key != res.Key || res.Attempts <= 2 {
		t.Errorf("gave up with key %q after %d attempts; want the call's key, after more than MaxAttempts (2): a 409 in-progress does not count", gu.Key, res.Attempts)
	}
}
