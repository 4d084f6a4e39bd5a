package idemhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

// concurrent fires n identical requests at the same instant (a shared barrier) and returns what
// each got.
func concurrent(t *testing.T, n int, do func() (*idemhttp.Result, error)) []*idemhttp.Result {
	t.Helper()
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	results := make([]*idemhttp.Result, n)
	errs := make([]error, n)
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			results[i], errs[i] = do()
		}()
	}
	ready.Wait()
	close(start)
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	storetest.Recv(t, finished, time.Minute, fmt.Sprintf("some of %d concurrent requests never returned", n))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return results
}

func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		t.Run(map[idem.ClaimMode]string{idem.ClaimLease: "lease", idem.ClaimTransaction: "transaction"}[mode], func(t *testing.T) {
			t.Parallel()
			// Fewer connections than requests: the rest queue for one, as under load.
			e := newEnv(t, nil, &idemtest.SchemaOpts{MaxConns: 34})
			e.Warm(32)
			p := policy()
			p.Claim = mode
			if mode == idem.ClaimTransaction {
				p.Wait = 10 * time.Second // duplicates wait for the first, then replay
			}
			var mu sync.Mutex
			calls := 0
			fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				mu.Lock()
				calls++
				mu.Unlock()
				time.Sleep(200 * time.Millisecond) // keep the first in flight while the others arrive
				return insertPayment(100)(ctx, tx)
			}
			res := concurrent(t, 64, func() (*idemhttp.Result, error) {
				return idemhttp.Serve(context.Background(), e.Store, p, request("pay-64", "fp"), fn)
			})
			byKind := map[string]int{}
			var executed *idemhttp.Result
			for _, r := range res {
				byKind[kindName(r)]++
				if r.Kind == idemhttp.ResultExecuted {
					executed = r
				}
			}
			t.Logf("results: %v", byKind)
			if calls != 1 || byKind["executed"] != 1 || e.Payments() != 1 {
				t.Fatalf("business function ran %d times, results %v, %d payment rows; want exactly one of each", calls, byKind, e.Payments())
			}
			if byKind["replayed"]+byKind["problem in-progress"] != 63 {
				t.Fatalf("results %v; every other caller must get a replay or in-progress", byKind)
			}
			if mode == idem.ClaimTransaction && byKind["replayed"] != 63 {
				t.Fatalf("results %v; in transaction mode every duplicate waits and replays", byKind)
			}
			for _, r := range res {
				if r.Kind == idemhttp.ResultReplayed && !bytes.Equal(r.Outcome.Body, executed.Outcome.Body) {
					t.Fatalf("replayed %q; want the first answer %q", r.Outcome.Body, executed.Outcome.Body)
				}
			}
			after, err := idemhttp.Serve(context.Background(), e.Store, p, request("pay-64", "fp"), fn)
			if err != nil || after.Kind != idemhttp.ResultReplayed || calls != 1 {
				t.Fatalf("request after all finished = %v, %v (calls %d); want a replay", after, err, calls)
			}
		})
	}
}

func TestMismatchIsCheckedBeforeInProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := policy()
	entered, finish := make(chan struct{}), make(chan struct{})
	first := make(chan *idemhttp.Result, 1)
	go func() {
		r, err := idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp-A"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-finish
			return insertPayment(1)(ctx, tx)
		})
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	<-entered

	r, err := idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp-B"), insertPayment(2))
	if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeKeyReused || r.Problem.Status != 422 {
		t.Fatalf("different request while the first is in flight = %+v, %v; want 422 key-reused", r, err)
	}
	p409 := policy()
	p409.MismatchStatus = 409
	if r, _ := idemhttp.Serve(context.Background(), e.Store, p409, request("k", "fp-B"), insertPayment(2)); r.Problem == nil || r.Problem.Status != 409 || r.Problem.Code != idemhttp.CodeKeyReused {
		t.Fatalf("mismatchStatus 409 gave %+v", r)
	}
	r, err = idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp-A"), insertPayment(1))
	if err != nil || r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeInProgress {
		t.Fatalf("same request while in flight = %+v, %v; want in-progress", r, err)
	}
	w := written(t, r)
	if w.Code != 409 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("in-progress answer: %d %v", w.Code, w.Header())
	}
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
		t.Fatalf("Retry-After = %q; want the seconds left on a 5s lease", w.Header().Get("Retry-After"))
	}
	close(finish)
	if r := <-first; r == nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("first request = %+v", r)
	}
	r, _ = idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp-B"), insertPayment(2))
	if r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeKeyReused {
		t.Fatalf("different request after completion = %s; want key-reused", kindName(r))
	}
	if n := e.Payments(); n != 1 {
		t.Fatalf("%d payments; want 1", n)
	}
}

func TestFailuresReleaseTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &idem.Config{MaxStoredBody: 64}, nil)
	ctx := context.Background()
	boom := errors.New("card declined by a flaky upstream")

	check := func(name string, wantKeys, wantPayments int) {
		t.Helper()
		if k, p := e.Keys(), e.Payments(); k != wantKeys || p != wantPayments {
			t.Fatalf("%s: %d key rows and %d payments; want %d and %d", name, k, p, wantKeys, wantPayments)
		}
	}
	failing := func(err error, out *idem.Outcome) idem.HandlerFunc {
		return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			if _, e := insertPayment(1)(ctx, tx); e != nil {
				return nil, e
			}
			return out, err
		}
	}

	// A Go error: rolled back, released, returned as it is.
	_, err := idemhttp.Serve(ctx, e.Store, policy(), request("k1", "fp"), failing(boom, nil))
	if !errors.Is(err, boom) {
		t.Fatalf("Serve returned %v; want the handler's error", err)
	}
	check("after a handler error", 0, 0)
	if r, err := idemhttp.Serve(ctx, e.Store, policy(), request("k1", "fp"), insertPayment(1)); err != nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("retry after an error = %+v, %v; want executed", r, err)
	}
	check("after the retry", 1, 1)

	// Statuses outside persist: answered, not stored, business work rolled back.
	for _, status := range []int{500, 503, 429, 408, 425} {
		p := policy()
		p.Persist = idem.Statuses("2xx", "4xx") // never 408/425/429, even inside a listed class
		key := "k-status-" + strconv.Itoa(status)
		for range 2 {
			r, err := idemhttp.Serve(ctx, e.Store, p, request(key, "fp"), failing(nil, &idem.Outcome{Status: status, Body: []byte("try later")}))
			if err != nil || r.Kind != idemhttp.ResultExecuted || r.Persisted || r.Outcome.Status != status {
				t.Fatalf("status %d = %+v, %v; want executed, not persisted (every time)", status, r, err)
			}
		}
		check("after unpersisted statuses", 1, 1)
	}
	// A listed 4xx is stored and replayed.
	p := policy()
	p.Persist = idem.Statuses("2xx", "409")
	r, _ := idemhttp.Serve(ctx, e.Store, p, request("k409", "fp"), failing(nil, &idem.Outcome{Status: 409, Body: []byte("conflict")}))
	if !r.Persisted {
		t.Fatal("a listed 409 was not persisted")
	}
	r, _ = idemhttp.Serve(ctx, e.Store, p, request("k409", "fp"), insertPayment(1))
	if r.Kind != idemhttp.ResultReplayed || r.Outcome.Status != 409 {
		t.Fatalf("replay of a stored 409 = %+v", r)
	}
	check("after a stored 409", 2, 2)

	// A body over MaxStoredBody: the handler succeeded, so its work commits and its client gets
	// the whole answer; the key keeps status and headers, and a replay says the body was not kept.
	big := &idem.Outcome{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/9"}},
		Body: bytes.Repeat([]byte("x"), 65)}
	r, err = idemhttp.Serve(ctx, e.Store, policy(), request("k-big", "fp"), failing(nil, big))
	if err != nil || r.Kind != idemhttp.ResultExecuted || !r.Persisted || len(r.Outcome.Body) != 65 {
		t.Fatalf("oversized body = %+v, %v; want executed, persisted, the whole body answered", r, err)
	}
	check("after an oversized body", 3, 3)
	r, err = idemhttp.Serve(ctx, e.Store, policy(), request("k-big", "fp"), failing(nil, big))
	w := written(t, r)
	if err != nil || r.Kind != idemhttp.ResultReplayed || w.Code != 201 || w.Body.Len() != 0 ||
		w.Header().Get(idemhttp.HeaderBodyOmitted) != "true" || w.Header().Get("Location") != "/v1/payments/9" {
		t.Fatalf("replay of an oversized body = %d %q %v, %v; want 201, no body, Location and %s: true", w.Code, w.Body.String(), w.Header(), err, idemhttp.HeaderBodyOmitted)
	}
	check("after its replay", 3, 3)

	// A panic: rolled back, released, and the panic continues.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic was swallowed")
			}
		}()
		_, _ = idemhttp.Serve(ctx, e.Store, policy(), request("k-panic", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			_, _ = insertPayment(1)(ctx, tx)
			panic("handler bug")
		})
	}()
	check("after a panic", 3, 3)

	// A cancelled context: rolled back and released.
	cctx, cancel := context.WithCancel(ctx)
	_, err = idemhttp.Serve(cctx, e.Store, policy(), request("k-cancel", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		out, err := insertPayment(1)(ctx, tx)
		cancel()
		return out, err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request gave %v; want context.Canceled", err)
	}
	check("after a cancelled request", 3, 3)
}

func TestTenantsNeverShareKeys(t *testing.T) {
	t.Parallel()
	type tenantKey struct{}
	e := newEnv(t, &idem.Config{Tenant: func(ctx context.Context) (string, error) {
		tenant, _ := ctx.Value(tenantKey{}).(string)
		if tenant == "" {
			return "", errors.New("unauthenticated")
		}
		return tenant, nil
	}}, nil)
	p := policy()
	p.ScopeTenant = true
	in := func(tenant string) context.Context {
		return context.WithValue(context.Background(), tenantKey{}, tenant)
	}

	a, err := idemhttp.Serve(in("acme"), e.Store, p, request("same-key", "fp"), insertPayment(10))
	if err != nil || a.Kind != idemhttp.ResultExecuted {
		t.Fatalf("tenant acme = %+v, %v", a, err)
	}
	b, err := idemhttp.Serve(in("globex"), e.Store, p, request("same-key", "fp"), insertPayment(20))
	if err != nil || b.Kind != idemhttp.ResultExecuted {
		t.Fatalf("tenant globex with acme's key = %+v, %v; want executed", b, err)
	}
	for tenant, want := range map[string]*idemhttp.Result{"acme": a, "globex": b} {
		r, err := idemhttp.Serve(in(tenant), e.Store, p, request("same-key", "fp"), insertPayment(99))
		if err != nil || r.Kind != idemhttp.ResultReplayed || !bytes.Equal(r.Outcome.Body, want.Outcome.Body) {
			t.Fatalf("replay in %s = %+v, %v; want its own %q", tenant, r, err, want.Outcome.Body)
		}
	}
	if n := e.Payments(); n != 2 {
		t.Fatalf("%d payments; want 2", n)
	}
	if _, err := idemhttp.Serve(context.Background(), e.Store, p, request("same-key", "fp"), insertPayment(1)); err == nil || err.Error() != "unauthenticated" {
		t.Fatalf("tenant error gave %v; want it returned", err)
	}
	// A tenant PostgreSQL text cannot hold could not be written to the business tables either:
	// it is refused before the claim (TestValuesTextCannotHoldAre400 covers the cases).
	if r, err := idemhttp.Serve(in("\x00"), e.Store, p, request("same-key", "fp"), insertPayment(1)); err != nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeRequestInvalid {
		t.Fatalf("a tenant made of a NUL byte = %+v, %v; want the 400 request-invalid problem", r, err)
	}
	emptyTenant, _ := idem.NewStore(e.Sch.Pool, &idem.Config{Schema: e.Sch.Name, Table: e.Sch.Table,
		Tenant: func(context.Context) (string, error) { return "", nil }})
	if _, err := idemhttp.Serve(in("acme"), emptyTenant, p, request("k", "fp"), insertPayment(1)); err == nil || !strings.Contains(err.Error(), "empty tenant") {
		t.Fatalf("an empty tenant gave %v; want an error", err)
	}
	// A policy that scopes by tenant on a store without a Tenant function is a wiring bug.
	noTenant, _ := idem.NewStore(e.Sch.Pool, e.Sch.Config())
	if _, err := idemhttp.Serve(in("acme"), noTenant, p, request("k", "fp"), insertPayment(1)); err == nil || !strings.Contains(err.Error(), "Config.Tenant") {
		t.Fatalf("missing Config.Tenant gave %v", err)
	}
}

func TestReplayWritesStoredAnswerWithAllowListedHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := policy()
	p.ReplayHeaders = []string{"X-Payment-Status", "Set-Cookie"} // Set-Cookie is never replayed
	body := []byte("{\"id\":1}\x00\xff raw bytes\n")
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		w := idemhttp.NewRecorder()
		h := w.Header()
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("Location", "/v1/payments/1")
		h.Set("ETag", `"v1"`)
		h.Set("X-Payment-Status", "captured")
		h.Set("X-Request-Id", "req-1")
		h.Set("Set-Cookie", "session=secret")
		h.Set("Connection", "close")
		w.WriteHeader(201)
		w.Write(body)
		return w.Outcome(), nil
	}
	r, err := idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp"), fn)
	if err != nil {
		t.Fatal(err)
	}
	w := written(t, r)
	if w.Code != 201 || w.Header().Get("Set-Cookie") == "" || w.Header().Get("X-Request-Id") == "" || w.Header().Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("fresh answer: %d %v; want the handler's own headers and no %s", w.Code, w.Header(), idemhttp.HeaderReplayed)
	}
	r, err = idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp"), fn)
	if err != nil || r.Kind != idemhttp.ResultReplayed {
		t.Fatalf("second request = %+v, %v", r, err)
	}
	w = written(t, r)
	if w.Code != 201 || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("replay = %d %q; want 201 %q byte for byte", w.Code, w.Body.Bytes(), body)
	}
	want := http.Header{
		"Content-Type":          {"application/json; charset=utf-8"},
		"Location":              {"/v1/payments/1"},
		"Etag":                  {`"v1"`},
		"X-Payment-Status":      {"captured"},
		idemhttp.HeaderReplayed: {"true"},
		"Cache-Control":         {"no-store"},
	}
	for k := range w.Header() {
		if _, ok := want[k]; !ok {
			t.Errorf("replay carries %s", k)
		}
	}
	for k, v := range want {
		if got := w.Header().Values(k); strings.Join(got, ",") != strings.Join(v, ",") {
			t.Errorf("replay %s = %q; want %q", k, got, v)
		}
	}
}

func TestReferenceAndMarkerStorage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	ref := policy()
	ref.Storage = idemhttp.StorageReference
	withRef := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		out, err := insertPayment(1)(ctx, tx)
		if err == nil {
			out.Reference = "pay_1"
		}
		return out, err
	}
	if r, err := idemhttp.Serve(ctx, e.Store, ref, request("r", "fp"), withRef); err != nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("reference execute = %+v, %v", r, err)
	}
	r, err := idemhttp.Serve(ctx, e.Store, ref, request("r", "fp"), withRef)
	if err != nil || r.Kind != idemhttp.ResultReplayed || r.Outcome.Reference != "pay_1" || r.Outcome.Status != 201 || len(r.Outcome.Body) != 0 {
		t.Fatalf("reference replay = %+v, %v; want status and reference only", r.Outcome, err)
	}
	if _, err := idemhttp.Serve(ctx, e.Store, ref, request("r2", "fp"), insertPayment(1)); !errors.Is(err, idemhttp.ErrNoReference) {
		t.Fatalf("reference storage, 2xx without a reference gave %v; want ErrNoReference", err)
	}
	if e.Count("SELECT count(*) FROM "+e.Store.Table()+" WHERE key = 'r2'") != 0 {
		t.Fatal("a 2xx without a reference left its key behind; want it released")
	}
	marker := policy()
	marker.Storage = idemhttp.StorageMarker
	idemhttp.Serve(ctx, e.Store, marker, request("m", "fp"), insertPayment(1))
	r, _ = idemhttp.Serve(ctx, e.Store, marker, request("m", "fp"), insertPayment(1))
	if r.Kind != idemhttp.ResultReplayed || r.Outcome.Status != 201 || len(r.Outcome.Body) != 0 || len(r.Outcome.Header) != 0 {
		t.Fatalf("marker replay = %+v; want the status only", r.Outcome)
	}
	if n := e.Payments(); n != 2 {
		t.Fatalf("%d payments; want 2", n)
	}
}

// A reference-storage operation that answers 404 or 400 has no resource to reload: the answer is
// stored whole and replayed byte for byte, and only the allow-listed headers come back.
func TestReferenceStorageKeepsAnswersWithoutAReferenceWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &idem.Config{Logger: newDebugLogger(io.Discard)}, nil)
	ctx := context.Background()
	ref := policy()
	ref.Storage = idemhttp.StorageReference
	calls := 0
	notFound := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		calls++
		rec := idemhttp.NewRecorder()
		rec.Header().Set("Content-Type", "application/problem+json")
		rec.Header().Set("Set-Cookie", "s=1")
		rec.WriteHeader(http.StatusNotFound)
		rec.Write([]byte(`{"title":"no such payment"}`))
		return rec.Outcome(), nil
	}
	first, err := idemhttp.Serve(ctx, e.Store, ref, request("nf", "fp"), notFound)
	if err != nil || first.Kind != idemhttp.ResultExecuted || !first.Persisted {
		t.Fatalf("404 without a reference = %+v, %v; want executed and persisted", first, err)
	}
	r, err := idemhttp.Serve(ctx, e.Store, ref, request("nf", "fp"), notFound)
	if err != nil || r.Kind != idemhttp.ResultReplayed || r.Outcome.Reference != "" || calls != 1 {
		t.Fatalf("retry = %+v, %v (handler ran %d times); want a replay without a reference", r, err, calls)
	}
	w := written(t, r)
	if w.Code != 404 || w.Body.String() != `{"title":"no such payment"}` || w.Header().Get("Content-Type") != "application/problem+json" ||
		w.Header().Get("Set-Cookie") != "" || w.Header().Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replayed 404 = %d %v %q; want the stored answer, allow-listed headers, marked replayed", w.Code, w.Header(), w.Body)
	}

	// A refusal that names its resource (a 409 with a reference) is stored whole too: reloading
	// the resource on a replay would turn the stored refusal into today's state of the resource.
	conflict := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		calls++
		rec := idemhttp.NewRecorder()
		rec.Header().Set("Content-Type", "application/problem+json")
		rec.WriteHeader(http.StatusConflict)
		rec.Write([]byte(`{"title":"already captured"}`))
		out := rec.Outcome()
		out.Reference = "pay_1"
		return out, nil
	}
	calls = 0
	if _, err := idemhttp.Serve(ctx, e.Store, ref, request("conflict", "fp"), conflict); err != nil {
		t.Fatal(err)
	}
	r, err = idemhttp.Serve(ctx, e.Store, ref, request("conflict", "fp"), conflict)
	if err != nil || r.Kind != idemhttp.ResultReplayed || r.Outcome.Reference != "" || calls != 1 {
		t.Fatalf("retry of a 409 with a reference = %+v, %v (handler ran %d times); want a whole replay without a reference", r, err, calls)
	}
	if w := written(t, r); w.Code != 409 || w.Body.String() != `{"title":"already captured"}` {
		t.Fatalf("replayed 409 = %d %q; want the stored answer byte for byte", w.Code, w.Body)
	}
}

func TestKeyProblemsAndOptionalKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx := context.Background()
	ran := false
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		ran = true
		return insertPayment(1)(ctx, tx)
	}
	r, err := idemhttp.Serve(ctx, e.Store, policy(), &idemhttp.Request{Fingerprint: "fp"}, fn)
	if err != nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeKeyMissing || ran {
		t.Fatalf("missing required key = %+v, %v (ran %v); want key-missing without running", r, err, ran)
	}
	r, _ = idemhttp.Serve(ctx, e.Store, policy(), &idemhttp.Request{KeyValues: []string{"a", "b"}}, fn)
	if r.Problem == nil || r.Problem.Code != idemhttp.CodeKeyInvalid || ran {
		t.Fatalf("two key headers = %+v; want key-invalid", r)
	}
	optional := policy()
	optional.Key.Required = false
	r, err = idemhttp.Serve(ctx, e.Store, optional, &idemhttp.Request{Fingerprint: "fp"}, fn)
	if err != nil || r.Kind != idemhttp.ResultExecuted || !ran || e.Payments() != 1 || e.Keys() != 0 {
		t.Fatalf("optional key absent = %+v, %v; want executed without a key row", r, err)
	}
	// The quoted form is the same key.
	idemhttp.Serve(ctx, e.Store, policy(), request("abc", "fp"), insertPayment(1))
	r, _ = idemhttp.Serve(ctx, e.Store, policy(), request(`"abc"`, "fp"), insertPayment(1))
	if r.Kind != idemhttp.ResultReplayed {
		t.Fatalf(`"abc" after abc = %s; want a replay`, kindName(r))
	}
}

func TestLeaseModeWaitReplaysInsteadOf409(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	slow := func(d time.Duration) idem.HandlerFunc {
		return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			time.Sleep(d)
			return insertPayment(1)(ctx, tx)
		}
	}
	for _, tc := range []struct {
		name string
		wait time.Duration
		run  time.Duration
		want string
	}{
		{"first finishes within the wait", 3 * time.Second, 300 * time.Millisecond, "replayed"},
		{"wait runs out", 100 * time.Millisecond, 1 * time.Second, "problem in-progress"},
	} {
		p := policy()
		p.Wait = tc.wait
		key := "k-" + tc.name
		started := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			idemhttp.Serve(context.Background(), e.Store, p, request(key, "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				close(started)
				return slow(tc.run)(ctx, tx)
			})
		}()
		<-started
		r, err := idemhttp.Serve(context.Background(), e.Store, p, request(key, "fp"), slow(0))
		if err != nil || kindName(r) != tc.want {
			t.Errorf("%s: duplicate got %s, %v; want %s", tc.name, kindName(r), err, tc.want)
		}
		<-done
	}
}

func TestTransactionModeWaitIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := policy()
	p.Claim = idem.ClaimTransaction
	p.Wait = 200 * time.Millisecond
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan *idemhttp.Result)
	go func() {
		r, _ := idemhttp.Serve(context.Background(), e.Store, p, request("k", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(started)
			<-finish
			return insertPayment(1)(ctx, tx)
		})
		done <- r
	}()
	<-started
	// The first request finishes only after the duplicate has answered, so an answer at all shows
	// the wait was bounded; were it not, the duplicate would run into its context's deadline
	// and return that error. (That duplicates do wait, and then replay, is
	// TestTransactionModeWaitersDoNotHoldConnections.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var events []idem.EventKind
	var mu sync.Mutex
	observed, _ := idem.NewStore(e.Sch.Pool, &idem.Config{Schema: e.Sch.Name, Table: e.Sch.Table,
		Observer: func(_ context.Context, ev idem.Event) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev.Kind)
		}})
	r, err := idemhttp.Serve(ctx, observed, p, request("k", "fp"), insertPayment(2))
	if err != nil || r.Problem == nil || r.Problem.Code != idemhttp.CodeInProgress {
		t.Fatalf("duplicate after the wait = %+v, %v; want in-progress", r, err)
	}
	mu.Lock()
	if len(events) != 1 || events[0] != idem.EventInProgress {
		t.Errorf("duplicate's events %v; want one in_progress, however often it retried", events)
	}
	mu.Unlock()
	close(finish)
	if first := <-done; first == nil || first.Kind != idemhttp.ResultExecuted {
		t.Fatalf("first = %+v", first)
	}
	// The wait bound is the claim's only: the business statements afterwards run without it.
	var lt string
	if _, err := idemhttp.Serve(context.Background(), e.Store, p, request("fresh", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		return &idem.Outcome{Status: 204}, tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&lt)
	}); err != nil || lt != "0" {
		t.Fatalf("lock_timeout in the handler after a transaction-mode claim = %q, %v; want the session's 0", lt, err)
	}
	if n := e.Payments(); n != 1 {
		t.Fatalf("%d payments; want 1", n)
	}
}

// batchCounter signals reached once n batches (the transaction-mode claims) have been sent.
type batchCounter struct {
	n       atomic.Int64
	want    int64
	reached chan struct{}
}

func (c *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if c.n.Add(1) == c.want {
		close(c.reached)
	}
	return ctx
}
func (c *batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (c *batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// Duplicates waiting in transaction mode must not each hold a pool connection for their whole
// wait: with four connections, a slow first request and four duplicates of it, a request for
// another key still gets a connection and succeeds.
func TestTransactionModeWaitersDoNotHoldConnections(t *testing.T) {
	t.Parallel()
	claims := &batchCounter{want: 4, reached: make(chan struct{})} // the first and three duplicates
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4, Tracer: claims})
	pool := sch.Pool
	c := sch.Config()
	c.StoreTimeout = time.Second // a request starved of connections fails after this
	s, err := idem.NewStore(pool, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY, key text, tenant text, amount int)`); err != nil {
		t.Fatal(err)
	}
	p := policy()
	p.Claim = idem.ClaimTransaction
	p.Wait = 30 * time.Second

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started, finish := make(chan struct{}), storetest.NewGate(t)
	first := make(chan *idemhttp.Result, 1)
	go func() {
		r, err := idemhttp.Serve(ctx, s, p, request("slow", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(started)
			<-finish.C
			return insertPayment(1)(ctx, tx)
		})
		if err != nil {
			t.Errorf("first: %v", err)
		}
		first <- r
	}()
	storetest.Recv(t, started, 10*time.Second, "the first request's handler never started")
	dups := make(chan *idemhttp.Result, 4)
	for range 4 {
		go func() {
			r, err := idemhttp.Serve(ctx, s, p, request("slow", "fp"), insertPayment(2))
			if err != nil {
				t.Errorf("duplicate: %v", err)
			}
			dups <- r
		}()
	}
	// Three duplicates have sent their claims; the fourth may be waiting too.
	storetest.Recv(t, claims.reached, 10*time.Second, "the duplicates never sent their claims")

	r, err := idemhttp.Serve(ctx, s, p, request("other", "fp"), insertPayment(3))
	if err != nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("a request for another key while four duplicates wait = %s, %v; want executed (the waiters hold connections?)", kindName(r), err)
	}
	finish.Open()
	if r := storetest.Recv(t, first, 20*time.Second, "the first request never returned"); r == nil || r.Kind != idemhttp.ResultExecuted {
		t.Fatalf("first = %+v", r)
	}
	for range 4 {
		if r := storetest.Recv(t, dups, 40*time.Second, "a duplicate never returned"); r == nil || r.Kind != idemhttp.ResultReplayed {
			t.Errorf("duplicate = %+v; want a replay of the first", r)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM payments WHERE key = 'slow'").Scan(&n); err != nil || n != 1 {
		t.Errorf("%d payments for the duplicated key, %v; want 1", n, err)
	}
}

// The key table leads its primary key with the tenant, and every request stores its tenant
// there (empty without a tenant in the scope), so on Citus the table can be distributed by
// tenant and co-located with the business tables: claim, complete, release and renew each name
// one tenant.
func TestTenantColumnLeadsTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &idem.Config{Tenant: func(context.Context) (string, error) { return "acme", nil }}, nil)
	ctx := context.Background()
	var pk []string
	if err := e.Sch.Pool.QueryRow(ctx, `SELECT array_agg(a.attname ORDER BY k.i)
		FROM pg_index x CROSS JOIN unnest(x.indkey) WITH ORDINALITY AS k(attnum, i)
		JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
		WHERE x.indrelid = $1::regclass AND x.indisprimary`, e.Store.Table()).Scan(&pk); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pk, ",") != "tenant,scope,key" {
		t.Fatalf("primary key (%s); want (tenant, scope, key), led by the distribution column", strings.Join(pk, ", "))
	}

	scoped := policy()
	scoped.ScopeTenant = true
	if _, err := idemhttp.Serve(ctx, e.Store, scoped, request("k1", "fp"), insertPayment(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := idemhttp.Serve(ctx, e.Store, policy(), request("k2", "fp"), insertPayment(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Do(ctx, &idem.DoParams{Tenant: "globex", Key: "k3"}, func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"k1": "acme", "k2": "", "k3": "globex"} {
		var tenant string
		if err := e.Sch.Pool.QueryRow(ctx, "SELECT tenant FROM "+e.Store.Table()+" WHERE key = $1", key).Scan(&tenant); err != nil || tenant != want {
			t.Errorf("key %s stored with tenant %q, %v; want %q", key, tenant, err, want)
		}
	}
}

// TestReplaysAreNotCacheable: every replay, a stored problem or a stored success, carries
// Cache-Control: no-store although Cache-Control is not on the replay allow-list; so does an
// answer written through ReplayWriter.
func TestReplaysAreNotCacheable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	problem := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		w := idemhttp.NewRecorder()
		(&idemhttp.Problem{Type: "urn:example:problem:not-capturable", Title: "Not capturable", Status: 409, Code: "not-capturable"}).WriteTo(w)
		return w.Outcome(), nil
	}
	created := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		w := idemhttp.NewRecorder()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.WriteHeader(201)
		return w.Outcome(), nil
	}
	for _, c := range []struct {
		key    string
		fn     idem.HandlerFunc
		status int
	}{{"problem", problem, 409}, {"created", created, 201}} {
		if _, err := idemhttp.Serve(context.Background(), e.Store, policy(), request(c.key, "fp"), c.fn); err != nil {
			t.Fatal(err)
		}
		r, err := idemhttp.Serve(context.Background(), e.Store, policy(), request(c.key, "fp"), c.fn)
		if err != nil || r.Kind != idemhttp.ResultReplayed {
			t.Fatalf("%s: retry = %+v, %v; want a replay", c.key, r, err)
		}
		if w := written(t, r); w.Code != c.status || w.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s: replay %d, headers %v; want %d with Cache-Control: no-store", c.key, w.Code, w.Header(), c.status)
		}
	}

	w := httptest.NewRecorder()
	rw := idemhttp.ReplayWriter(w)
	rw.Header().Set("Cache-Control", "max-age=60") // what a Replay<Op> response might set
	rw.WriteHeader(200)
	if w.Header().Get("Cache-Control") != "no-store" || w.Header().Get(idemhttp.HeaderReplayed) != "true" {
		t.Errorf("ReplayWriter headers %v; want Cache-Control: no-store and %s: true", w.Header(), idemhttp.HeaderReplayed)
	}
}
