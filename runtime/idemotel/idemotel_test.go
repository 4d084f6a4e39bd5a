package idemotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemotel"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// env is a store traced into an in-memory exporter, on a schema of its own.
type env struct {
	t     *testing.T
	store *idem.Store
	tp    *sdktrace.TracerProvider
	spans *tracetest.InMemoryExporter
	sch   *idemtest.Schema
}

func newEnv(t *testing.T, cacheBytes int64) *env {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg := sch.Config()
	cfg.Observer = idemotel.New(tp).Observer()
	cfg.ReplayCacheBytes = cacheBytes
	store, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE charges (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, store: store, tp: tp, spans: spans, sch: sch}
}

const rawKey = "key-7d0c5a1e-the-client-sent"

// request runs one request for rawKey with fingerprint fp under a server span of its own, as
// an instrumented HTTP server would, and returns the spans it produced, the server span last.
func (e *env) request(name, fp string) (tracetest.SpanStubs, error) {
	e.t.Helper()
	e.spans.Reset()
	ctx, server := e.tp.Tracer("test").Start(context.Background(), name)
	_, err := e.store.Do(ctx, &idem.DoParams{Scope: "acme", Key: rawKey, Operation: "createCharge", Fingerprint: fp},
		func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			if _, err := tx.Exec(ctx, `INSERT INTO charges (key) VALUES ($1)`, rawKey); err != nil {
				return nil, err
			}
			return &idem.Outcome{Status: 201, Body: []byte(`{"id":"ch_1"}`)}, nil
		})
	server.End()
	got := e.spans.GetSpans()
	if len(got) == 0 || got[len(got)-1].Name != name {
		e.t.Fatalf("%s: spans %v; want the request's own span last", name, names(got))
	}
	for _, s := range got[:len(got)-1] {
		if s.Parent.SpanID() != got[len(got)-1].SpanContext.SpanID() {
			e.t.Errorf("%s: span %s is not a child of the request's span", name, s.Name)
		}
	}
	return got[:len(got)-1], err
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// attrs renders a span's attributes as "key=value", sorted.
func attrs(s tracetest.SpanStub) []string {
	var out []string
	for _, kv := range s.Attributes {
		out = append(out, string(kv.Key)+"="+kv.Value.Emit())
	}
	slices.Sort(out)
	return out
}

// TestSpans: an executed request draws its claim, its handler and its completion; a retry its
// replay; the same key with another request its refused claim. Every span names the operation,
// the outcome and the key's hash, and the raw key appears nowhere.
func TestSpans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	hash := "idem.key_hash=" + idem.KeyHash("acme", rawKey)

	executed, err := e.request("executed", "fp-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		idemotel.SpanClaim:    {"idem.attempt=1", hash, "idem.operation=createCharge", "idem.outcome=acquired"},
		idemotel.SpanHandler:  {"idem.attempt=1", hash, "idem.operation=createCharge", "idem.outcome=completed"},
		idemotel.SpanComplete: {"idem.attempt=1", hash, "idem.operation=createCharge", "idem.outcome=completed"},
	}
	checkSpans(t, "executed", executed, want)
	// The steps follow each other: the claim ends before the handler starts, which ends where
	// the completion starts.
	claim, handler, complete := find(executed, idemotel.SpanClaim), find(executed, idemotel.SpanHandler), find(executed, idemotel.SpanComplete)
	if claim.EndTime.After(handler.StartTime) || !handler.EndTime.Equal(complete.StartTime) || !claim.StartTime.Before(claim.EndTime) {
		t.Errorf("executed: claim %s–%s, handler %s–%s, completion %s–%s; want them in order, the claim not empty",
			claim.StartTime, claim.EndTime, handler.StartTime, handler.EndTime, complete.StartTime, complete.EndTime)
	}

	replayed, err := e.request("replayed", "fp-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSpans(t, "replayed", replayed, map[string][]string{
		idemotel.SpanReplay: {hash, "idem.operation=createCharge", "idem.outcome=replayed"},
	})

	mismatched, err := e.request("mismatched", "fp-2")
	if !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("mismatched request: %v; want ErrKeyReused", err)
	}
	checkSpans(t, "mismatched", mismatched, map[string][]string{
		idemotel.SpanClaim: {hash, "idem.operation=createCharge", "idem.outcome=key_reused"},
	})
	if s := find(mismatched, idemotel.SpanClaim); s.Status.Code == codes.Error {
		t.Errorf("a reused key marks its span as a server error: %+v", s.Status)
	}

	var n int
	if err := e.sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM charges`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d charges, %v; want 1", n, err)
	}
}

// TestCachedReplaySpan: a replay the cache answers is drawn too, marked cached.
func TestCachedReplaySpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1<<20)
	if _, err := e.request("executed", "fp-1"); err != nil {
		t.Fatal(err)
	}
	replayed, err := e.request("replayed", "fp-1")
	if err != nil {
		t.Fatal(err)
	}
	checkSpans(t, "replayed from the cache", replayed, map[string][]string{
		idemotel.SpanReplay: {"idem.cached=true", "idem.key_hash=" + idem.KeyHash("acme", rawKey), "idem.operation=createCharge", "idem.outcome=replayed"},
	})
}

// TestHandlerTimeoutIsAnError: a handler that runs past its timeout draws an error span.
func TestHandlerTimeoutIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	e.spans.Reset()
	_, err := e.store.Do(context.Background(), &idem.DoParams{Scope: "acme", Key: "slow", Operation: "slow", Fingerprint: "fp", Timeout: 50 * time.Millisecond},
		func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	if !errors.Is(err, idem.ErrHandlerTimeout) {
		t.Fatalf("slow handler: %v; want ErrHandlerTimeout", err)
	}
	h := find(e.spans.GetSpans(), idemotel.SpanHandler)
	if h.Status.Code != codes.Error || !slices.Contains(attrs(h), "idem.outcome=handler_timeout") {
		t.Errorf("handler span %+v %v; want an error with outcome handler_timeout", h.Status, attrs(h))
	}
}

// TestHandlerFailedIsAnError: a handler that answers over a transaction one of its statements
// aborted draws an error span with outcome handler_failed, not a store error.
func TestHandlerFailedIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	e.spans.Reset()
	_, err := e.store.Do(context.Background(), &idem.DoParams{Scope: "acme", Key: "aborted", Operation: "aborted", Fingerprint: "fp"},
		func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			_, _ = tx.Exec(ctx, "SELECT 1/0") // fails, and the handler answers anyway
			return &idem.Outcome{Status: 201}, nil
		})
	if !errors.Is(err, idem.ErrHandlerAborted) {
		t.Fatalf("handler over an aborted transaction: %v; want ErrHandlerAborted", err)
	}
	h := find(e.spans.GetSpans(), idemotel.SpanHandler)
	if h.Status.Code != codes.Error || !slices.Contains(attrs(h), "idem.outcome=handler_failed") {
		t.Errorf("handler span %+v %v; want an error with outcome handler_failed", h.Status, attrs(h))
	}
}

func checkSpans(t *testing.T, what string, got tracetest.SpanStubs, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: spans %v; want one each of %v", what, names(got), keys(want))
	}
	for name, w := range want {
		s := find(got, name)
		if s.Name == "" {
			t.Errorf("%s: no %s span among %v", what, name, names(got))
			continue
		}
		if a := attrs(s); !slices.Equal(a, w) {
			t.Errorf("%s: %s attributes %v; want %v", what, name, a, w)
		}
	}
	for _, s := range got {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), rawKey) {
				t.Errorf("%s: span %s records the raw key in %s", what, s.Name, kv.Key)
			}
		}
	}
}

func find(spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	return tracetest.SpanStub{}
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
