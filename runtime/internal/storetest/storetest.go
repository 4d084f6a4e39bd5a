// Package storetest is the shared setup of runtime/idem's and runtime/idemhttp's tests: a store
// on a test's own schema with a business table, and the requests and handlers they send.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// Env is a test's store on its own schema, with a business table "payments".
type Env struct {
	T     testing.TB
	Store *idem.Store
	Sch   *idemtest.Schema
}

func NewEnv(t testing.TB, cfg *idem.Config, opts *idemtest.SchemaOpts) *Env {
	t.Helper()
	sch := idemtest.TestSchema(t, opts)
	c := sch.Config()
	if cfg != nil {
		cfg.Schema, cfg.Table = c.Schema, c.Table
		c = cfg
	}
	s, err := idem.NewStore(sch.Pool, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close) // before the pool closes: cleanups run last-in first-out
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE payments (
		id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		key    text NOT NULL,
		tenant text NOT NULL DEFAULT '',
		amount integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Store: s, Sch: sch}
}

// Warm opens n pool connections up front, so that concurrent requests race each other and not
// the connection setup.
func (e *Env) Warm(n int) {
	e.T.Helper()
	conns := make([]interface{ Release() }, 0, n)
	defer func() { // also when a connection fails: a held one would keep the pool from closing
		for _, c := range conns {
			c.Release()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range n {
		c, err := e.Sch.Pool.Acquire(ctx)
		if err != nil {
			e.T.Fatalf("open %d pool connections up front: %v", n, err)
		}
		conns = append(conns, c)
	}
}

func (e *Env) Count(sql string, args ...any) int {
	e.T.Helper()
	var n int
	if err := e.Sch.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (e *Env) Payments() int { return e.Count("SELECT count(*) FROM payments") }
func (e *Env) Keys() int     { return e.Count("SELECT count(*) FROM " + e.Store.Table()) }

// InsertPayment is a business handler: it inserts one payment for the claimed key and answers
// 201 with the new id.
func InsertPayment(amount int) idem.HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		key := "no-key"
		if c, ok := idem.ClaimFromContext(ctx); ok {
			key = c.Key
		}
		var id int64
		if err := tx.QueryRow(ctx, "INSERT INTO payments (key, amount) VALUES ($1, $2) RETURNING id", key, amount).Scan(&id); err != nil {
			return nil, err
		}
		rec := idemhttp.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		rec.Header().Set("Location", fmt.Sprintf("/v1/payments/%d", id))
		rec.WriteHeader(201)
		fmt.Fprintf(rec, `{"id":%d,"amount":%d}`, id, amount)
		return rec.Outcome(), nil
	}
}

func Policy() *idemhttp.Policy {
	return &idemhttp.Policy{
		Operation: "createPayment",
		Route:     "POST /v1/payments",
		Lease:     5 * time.Second,
		Key:       idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
	}
}

func Request(key, fingerprint string) *idemhttp.Request {
	return &idemhttp.Request{
		KeyValues:   []string{key},
		Scope:       []idemhttp.ScopePart{{Name: "operation", Value: "createPayment"}},
		Fingerprint: fingerprint,
	}
}

func Written(t testing.TB, r *idemhttp.Result) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	if err := r.WriteTo(w); err != nil {
		t.Fatal(err)
	}
	return w
}

func KindName(r *idemhttp.Result) string {
	switch r.Kind {
	case idemhttp.ResultExecuted:
		return "executed"
	case idemhttp.ResultReplayed:
		return "replayed"
	case idemhttp.ResultProblem:
		return "problem " + r.Problem.Code
	}
	return fmt.Sprintf("kind %d", r.Kind)
}

type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func NewDebugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Recv waits for a value from ch for at most limit, failing t with what did not happen.
func Recv[T any](t testing.TB, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("after %s: %s", limit, what)
		panic("unreachable")
	}
}

// Gate is a channel a test's handler blocks on until the test opens it. It is opened at the
// latest when the test ends, before its pool closes, so that a test that fails while a handler
// is blocked fails instead of hanging in the pool's Close.
type Gate struct {
	C    chan struct{}
	once sync.Once
}

// NewGate returns a closed-at-cleanup gate; call it after the test's store and pool exist.
func NewGate(t testing.TB) *Gate {
	g := &Gate{C: make(chan struct{})}
	t.Cleanup(g.Open)
	return g
}

// Open lets every blocked handler go; it may be called more than once.
func (g *Gate) Open() { g.once.Do(func() { close(g.C) }) }
