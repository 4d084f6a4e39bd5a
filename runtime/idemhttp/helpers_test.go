package idemhttp_test

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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// env is a test's store on its own schema, with a business table "payments".
type env struct {
	t     testing.TB
	store *idem.Store
	sch   *idemtest.Schema
}

func newEnv(t testing.TB, cfg *idem.Config, opts *idemtest.SchemaOpts) *env {
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
	return &env{t: t, store: s, sch: sch}
}

// warm opens n pool connections up front, so that concurrent requests race each other and not
// the connection setup.
func (e *env) warm(n int) {
	e.t.Helper()
	conns := make([]interface{ Release() }, 0, n)
	for range n {
		c, err := e.sch.Pool.Acquire(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.sch.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (e *env) payments() int { return e.count("SELECT count(*) FROM payments") }
func (e *env) keys() int     { return e.count("SELECT count(*) FROM " + e.store.Table()) }

// insertPayment is a business handler: it inserts one payment for the claimed key and answers
// 201 with the new id.
func insertPayment(amount int) idem.HandlerFunc {
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

func policy() *idemhttp.Policy {
	return &idemhttp.Policy{
		Operation: "createPayment",
		Route:     "POST /v1/payments",
		Lease:     5 * time.Second,
		Key:       idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
	}
}

func request(key, fingerprint string) *idemhttp.Request {
	return &idemhttp.Request{
		KeyValues:   []string{key},
		Scope:       []idemhttp.ScopePart{{Name: "operation", Value: "createPayment"}},
		Fingerprint: fingerprint,
	}
}

func written(t testing.TB, r *idemhttp.Result) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	if err := r.WriteTo(w); err != nil {
		t.Fatal(err)
	}
	return w
}

func kindName(r *idemhttp.Result) string {
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

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newDebugLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// idemtestPool is a pool on e's server that is already closed, as at a shutdown racing a request.
func idemtestPool(t testing.TB, e *env) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), e.sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	return p
}
