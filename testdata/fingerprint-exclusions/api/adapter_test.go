package api_test

// These tests drive the golden package over real HTTP against real PostgreSQL: a retry that
// changes only excluded values (X-Request-Id, X-Signature, the sent_at query parameter, the
// client_time body field) is replayed, while a change to anything still fingerprinted is
// key-reused; and an operation with fingerprint: false replays whatever is sent with its key, a
// multipart body included.
// internal/cli's TestGenerateGolden runs them.

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/fingerprint-exclusions/api"
	"idemgen.test/golden/internal/goldenhttp"
)

type server struct{}

func (server) CreateOrder(ctx context.Context, tx pgx.Tx, req api.CreateOrderRequestObject) (api.CreateOrderResponseObject, error) {
	o := api.Order{Sku: req.Body.Sku, Quantity: req.Body.Quantity}
	if err := tx.QueryRow(ctx, `INSERT INTO orders (sku, quantity) VALUES ($1, $2) RETURNING id::text`, o.Sku, o.Quantity).Scan(&o.OrderId); err != nil {
		return nil, err
	}
	return api.CreateOrder201JSONResponse(o), nil
}

func (server) AddNote(ctx context.Context, tx pgx.Tx, req api.AddNoteRequestObject) (api.AddNoteResponseObject, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO notes (order_id, text) VALUES ($1, $2)`, req.OrderId, req.Body.Text); err != nil {
		return nil, err
	}
	return api.AddNote201JSONResponse{OrderId: req.OrderId, Text: req.Body.Text}, nil
}

func (server) AttachFile(ctx context.Context, tx pgx.Tx, req api.AttachFileRequestObject) (api.AttachFileResponseObject, error) {
	part, err := req.Body.NextPart()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(part)
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO attachments (order_id, data) VALUES ($1, $2)`, req.OrderId, data); err != nil {
		return nil, err
	}
	return api.AttachFile201JSONResponse{Bytes: len(data)}, nil
}

type fixture struct {
	url  string
	pool *pgxpool.Pool
}

func setup(t *testing.T) *fixture {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	if _, err := sch.Pool.Exec(context.Background(), `
		CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL);
		CREATE TABLE notes (order_id text NOT NULL, text text NOT NULL);
		CREATE TABLE attachments (order_id text NOT NULL, data bytea NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{
		Schema: sch.Name,
		Tenant: func(context.Context) (string, error) { return "t1", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := api.NewIdempotentHandler(server{}, store, nil)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &fixture{url: hs.URL, pool: sch.Pool}
}

type answer = goldenhttp.Answer

// do sends one JSON request; headers are name, value pairs.
func (f *fixture) do(t *testing.T, path, body string, headers ...string) answer {
	t.Helper()
	return f.send(t, path, "application/json", body, headers...)
}

func (f *fixture) send(t *testing.T, path, contentType, body string, headers ...string) answer {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Set(headers[i], headers[i+1])
	}
	return goldenhttp.Send(t, "POST", f.url+path, contentType, body, h)
}

func (f *fixture) count(t *testing.T, table string) int { return goldenhttp.Count(t, f.pool, table) }

func problemCode(t *testing.T, a answer) string { return goldenhttp.ProblemCode(t, a) }

const orderBody = `{"sku": "A-1", "quantity": 1, "client_time": "2026-11-30T10:00:00Z"}`

func TestExcludedParamsDoNotBreakRetries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.do(t, "/v1/orders?sent_at=2026-11-30T10:00:00Z&dry_run=false", orderBody,
		"Idempotency-Key", "k1", "X-Request-Id", "req-1", "X-Signature", "sig-1", "X-Channel", "web")
	if first.Status != 201 || first.Replayed() {
		t.Fatalf("first: %v, want a fresh 201", first)
	}

	// An honest retry: new request id, new signature, new send time in the query and the body.
	retry := f.do(t, "/v1/orders?sent_at=2026-11-30T10:00:05Z&dry_run=false",
		`{"sku": "A-1", "quantity": 1, "client_time": "2026-11-30T10:00:05Z"}`,
		"Idempotency-Key", "k1", "X-Request-Id", "req-2", "X-Signature", "sig-2", "X-Channel", "web")
	if retry.Status != 201 || !retry.Replayed() || retry.Body != first.Body {
		t.Errorf("retry with other excluded values: %v, want the first answer (%s) replayed", retry, strings.TrimSpace(first.Body))
	}

	// Everything that is not excluded still counts.
	for name, a := range map[string]answer{
		"other body": f.do(t, "/v1/orders?sent_at=2026-11-30T10:00:00Z&dry_run=false", `{"sku": "A-1", "quantity": 2}`,
			"Idempotency-Key", "k1", "X-Request-Id", "req-3", "X-Channel", "web"),
		"other declared header": f.do(t, "/v1/orders?sent_at=2026-11-30T10:00:00Z&dry_run=false", orderBody,
			"Idempotency-Key", "k1", "X-Request-Id", "req-1", "X-Signature", "sig-1", "X-Channel", "mobile"),
		"other query parameter": f.do(t, "/v1/orders?sent_at=2026-11-30T10:00:00Z&dry_run=true", orderBody,
			"Idempotency-Key", "k1", "X-Request-Id", "req-1", "X-Signature", "sig-1", "X-Channel", "web"),
	} {
		if a.Status != 422 || problemCode(t, a) != idemhttp.CodeKeyReused {
			t.Errorf("%s with the same key: %v, want 422 key-reused", name, a)
		}
	}
	if n := f.count(t, "orders"); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

func TestFingerprintOffReplaysAnyRequest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.do(t, "/v1/orders/o1/notes", `{"text": "first"}`, "Idempotency-Key", "n1", "X-Request-Id", "req-1")
	if first.Status != 201 || first.Replayed() || !strings.Contains(first.Body, `"text":"first"`) {
		t.Fatalf("first: %v, want a fresh 201", first)
	}
	// Another body and another declared header: with the fingerprint off it is the same request.
	again := f.do(t, "/v1/orders/o1/notes", `{"text": "second"}`, "Idempotency-Key", "n1", "X-Request-Id", "req-2")
	if again.Status != 201 || !again.Replayed() || again.Body != first.Body {
		t.Errorf("same key, other body: %v, want the first answer (%s) replayed", again, strings.TrimSpace(first.Body))
	}
	if n := f.count(t, "notes"); n != 1 {
		t.Errorf("%d notes, want 1", n)
	}

	// The scope leaves out the operation, so both operations share one key space: the route in
	// the fingerprint still refuses a key that createOrder used, in either direction.
	if a := f.do(t, "/v1/orders", orderBody, "Idempotency-Key", "n1"); a.Status != 422 || problemCode(t, a) != idemhttp.CodeKeyReused {
		t.Errorf("addNote's key on createOrder: %v, want 422 key-reused", a)
	}
	if a := f.do(t, "/v1/orders", orderBody, "Idempotency-Key", "o1"); a.Status != 201 {
		t.Fatalf("createOrder: %v", a)
	}
	if a := f.do(t, "/v1/orders/o1/notes", `{"text": "x"}`, "Idempotency-Key", "o1"); a.Status != 422 || problemCode(t, a) != idemhttp.CodeKeyReused {
		t.Errorf("createOrder's key on addNote: %v, want 422 key-reused", a)
	}
}

// upload sends data as the multipart field "file".
func (f *fixture) upload(t *testing.T, path, data string, headers ...string) answer {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	fw, err := w.CreateFormFile("file", "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(fw, data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return f.send(t, path, w.FormDataContentType(), b.String(), headers...)
}

func TestFingerprintOffUnfingerprintableBody(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.upload(t, "/v1/orders/o1/attachments", "hello", "Idempotency-Key", "a1")
	if first.Status != 201 || first.Replayed() || !strings.Contains(first.Body, `"bytes":5`) {
		t.Fatalf("first upload: %v, want a fresh 201 of 5 bytes", first)
	}
	again := f.upload(t, "/v1/orders/o1/attachments", "hello, world", "Idempotency-Key", "a1")
	if again.Status != 201 || !again.Replayed() || again.Body != first.Body {
		t.Errorf("same key, other file: %v, want the first answer (%s) replayed", again, strings.TrimSpace(first.Body))
	}
	// The scope has the order, so the same key on another order is another request.
	if a := f.upload(t, "/v1/orders/o2/attachments", "hello", "Idempotency-Key", "a1"); a.Status != 201 || a.Replayed() {
		t.Errorf("same key, other order: %v, want a fresh 201", a)
	}
	if n := f.count(t, "attachments"); n != 2 {
		t.Errorf("%d attachments, want 2", n)
	}
}
