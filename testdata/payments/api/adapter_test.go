package api_test

// These tests drive the golden payments package over real HTTP against real PostgreSQL, so the
// generated adapter is checked for behaviour, not only for compiling: the relaxed key header
// reaches the runtime, replays are marked, reference replays reload, marker replays recompute,
// the parameter error handler answers a doubled key header with the runtime's problem, and a
// failing handler leaves no row and releases its key. internal/cli's TestGenerateGolden runs them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/internal/goldenhttp"
	"idemgen.test/golden/payments/api"
)

type tenantKey struct{}

// server implements the generated IdempotentServerInterface on a payments table.
type server struct {
	pool    *pgxpool.Pool
	failing atomic.Bool  // CreatePayment fails after its insert while set
	replays atomic.Int64 // ReplayCapturePayment calls
}

func tenant(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }

func (s *server) CreatePayment(ctx context.Context, tx pgx.Tx, req api.CreatePaymentRequestObject) (api.CreatePaymentResponseObject, error) {
	claim, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return nil, errors.New("no claim in the handler's context")
	}
	p := api.Payment{PaymentId: tenant(ctx) + "-" + claim.Key, AmountMinor: req.Body.AmountMinor, Currency: req.Body.Currency, Status: api.Created}
	if _, err := tx.Exec(ctx, `INSERT INTO payments (id, amount_minor, currency, status) VALUES ($1, $2, $3, $4)`,
		p.PaymentId, p.AmountMinor, p.Currency, p.Status); err != nil {
		return nil, err
	}
	if s.failing.Load() {
		return nil, errors.New("boom")
	}
	return api.CreatePayment201JSONResponse(p), nil
}

func (s *server) load(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, id string) (*api.Payment, error) {
	var p api.Payment
	var captured *int64
	err := q.QueryRow(ctx, `SELECT id, amount_minor, currency, status, captured_minor FROM payments WHERE id = $1`, id).
		Scan(&p.PaymentId, &p.AmountMinor, &p.Currency, &p.Status, &captured)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	p.CapturedMinor = captured
	return &p, err
}

func (s *server) GetPayment(ctx context.Context, req api.GetPaymentRequestObject) (api.GetPaymentResponseObject, error) {
	p, err := s.load(ctx, s.pool, req.PaymentId)
	if err != nil || p == nil {
		return api.GetPayment404ApplicationProblemPlusJSONResponse{}, err
	}
	return api.GetPayment200JSONResponse(*p), nil
}

func (s *server) CapturePayment(ctx context.Context, tx pgx.Tx, req api.CapturePaymentRequestObject) (api.CapturePaymentResponseObject, string, error) {
	tag, err := tx.Exec(ctx, `UPDATE payments SET status = 'captured', captured_minor = amount_minor WHERE id = $1`, req.PaymentId)
	if err != nil {
		return nil, "", err
	}
	if tag.RowsAffected() == 0 {
		return api.CapturePayment404ApplicationProblemPlusJSONResponse{}, "", nil
	}
	p, err := s.load(ctx, tx, req.PaymentId)
	if err != nil {
		return nil, "", err
	}
	return api.CapturePayment200JSONResponse(*p), p.PaymentId, nil
}

func (s *server) ReplayCapturePayment(ctx context.Context, req api.CapturePaymentRequestObject, reference string) (api.CapturePaymentResponseObject, error) {
	s.replays.Add(1)
	p, err := s.load(ctx, s.pool, reference)
	if err != nil || p == nil {
		return api.CapturePayment404ApplicationProblemPlusJSONResponse{}, err
	}
	return api.CapturePayment200JSONResponse(*p), nil
}

func (s *server) RefundPayment(ctx context.Context, tx pgx.Tx, req api.RefundPaymentRequestObject) (api.RefundPaymentResponseObject, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO refunds (payment_id, amount_minor) VALUES ($1, $2)`, req.PaymentId, req.Body.AmountMinor); err != nil {
		return nil, err
	}
	return api.RefundPayment202JSONResponse{PaymentId: req.PaymentId, AmountMinor: req.Body.AmountMinor}, nil
}

func (s *server) ReplayRefundPayment(ctx context.Context, req api.RefundPaymentRequestObject, status int) (api.RefundPaymentResponseObject, error) {
	if status != http.StatusAccepted {
		return api.RefundPayment404ApplicationProblemPlusJSONResponse{}, nil
	}
	return api.RefundPayment202JSONResponse{PaymentId: req.PaymentId, AmountMinor: req.Body.AmountMinor}, nil
}

type fixture struct {
	srv  *server
	http *httptest.Server
	pool *pgxpool.Pool
}

func setup(t *testing.T) *fixture {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if _, err := sch.Pool.Exec(ctx, `
		CREATE TABLE payments (id text PRIMARY KEY, amount_minor bigint NOT NULL, currency text NOT NULL,
			status text NOT NULL, captured_minor bigint);
		CREATE TABLE refunds (payment_id text NOT NULL, amount_minor bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{
		Schema: sch.Name,
		Tenant: func(ctx context.Context) (string, error) { return tenant(ctx), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &server{pool: sch.Pool}
	h := api.NewIdempotentHandler(srv, store, nil)
	withTenant := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant-ID"))))
	})
	hs := httptest.NewServer(withTenant)
	t.Cleanup(hs.Close)
	return &fixture{srv: srv, http: hs, pool: sch.Pool}
}

type answer = goldenhttp.Answer

func (f *fixture) do(t *testing.T, method, path, body string, keys ...string) answer {
	t.Helper()
	return goldenhttp.Send(t, method, f.http.URL+path, "application/json", body,
		http.Header{"X-Tenant-Id": {"t1"}, "Idempotency-Key": keys})
}

func (f *fixture) count(t *testing.T, table string) int { return goldenhttp.Count(t, f.pool, table) }

func problemCode(t *testing.T, a answer) string { return goldenhttp.ProblemCode(t, a) }

const paymentBody = `{"amount_minor": 19900, "currency": "RUB"}`

func TestCreateReplaysAndRejects(t *testing.T) {
	t.Parallel()
	f := setup(t)

	if a := f.do(t, "POST", "/v1/payments", paymentBody); a.Status != 400 || problemCode(t, a) != idemhttp.CodeKeyMissing {
		t.Errorf("no key: %d %s, want 400 key-missing (the required header must reach the runtime)", a.Status, a.Body)
	}
	if a := f.do(t, "POST", "/v1/payments", paymentBody, "k1", "k2"); a.Status != 400 || problemCode(t, a) != idemhttp.CodeKeyInvalid {
		t.Errorf("two key headers: %d %s, want 400 key-invalid from IdempotencyParamErrorHandler", a.Status, a.Body)
	}

	first := f.do(t, "POST", "/v1/payments", paymentBody, "k1")
	if first.Status != 201 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
	}
	// Same request, other key order and spacing: the fingerprint comes from the typed body.
	again := f.do(t, "POST", "/v1/payments", `{"currency":"RUB","amount_minor":19900}`, "k1")
	if again.Status != 201 || again.Body != first.Body || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %v %s, want the first answer byte for byte, marked replayed", again.Status, again.Header, again.Body)
	}
	if a := f.do(t, "POST", "/v1/payments", `{"amount_minor": 1, "currency": "RUB"}`, "k1"); a.Status != 422 || problemCode(t, a) != idemhttp.CodeKeyReused {
		t.Errorf("same key, other body: %d %s, want 422 key-reused", a.Status, a.Body)
	}
	if n := f.count(t, "payments"); n != 1 {
		t.Errorf("%d payments, want 1", n)
	}
}

func TestConcurrentDuplicatesMakeOnePayment(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 20
	var wg sync.WaitGroup
	answers := make([]answer, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = f.do(t, "POST", "/v1/payments", paymentBody, "same")
		}()
	}
	close(start)
	wg.Wait()
	var created string
	for _, a := range answers {
		switch {
		case a.Status == 201 && a.Header.Get("Idempotent-Replayed") == "":
			if created != "" {
				t.Errorf("two requests executed")
			}
			created = a.Body
		case a.Status == 201 || a.Status == 409:
		default:
			t.Errorf("unexpected answer %d %s", a.Status, a.Body)
		}
	}
	if got := f.count(t, "payments"); got != 1 {
		t.Errorf("%d payments after %d identical concurrent requests, want 1", got, n)
	}
}

func TestHandlerErrorReleasesTheKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.srv.failing.Store(true)
	if a := f.do(t, "POST", "/v1/payments", paymentBody, "k"); a.Status != 500 {
		t.Errorf("failing handler: %d %s, want 500", a.Status, a.Body)
	}
	if n := f.count(t, "payments"); n != 0 {
		t.Errorf("%d payments after a failed handler, want 0 (rolled back)", n)
	}
	f.srv.failing.Store(false)
	if a := f.do(t, "POST", "/v1/payments", paymentBody, "k"); a.Status != 201 || a.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("retry after the failure: %d %v %s, want a fresh 201", a.Status, a.Header, a.Body)
	}
}

func TestReferenceReplayReloadsAndMarkerReplayRecomputes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	created := f.do(t, "POST", "/v1/payments", paymentBody, "p")
	var p api.Payment
	if err := json.Unmarshal([]byte(created.Body), &p); err != nil {
		t.Fatal(err)
	}
	capture := "/v1/payments/" + p.PaymentId + "/capture"

	first := f.do(t, "POST", capture, `{}`, "c")
	if first.Status != 200 || !strings.Contains(first.Body, `"status":"captured"`) {
		t.Fatalf("capture: %d %s", first.Status, first.Body)
	}
	if _, err := f.pool.Exec(context.Background(), `UPDATE payments SET status = 'refunded' WHERE id = $1`, p.PaymentId); err != nil {
		t.Fatal(err)
	}
	replay := f.do(t, "POST", capture, `{}`, "c")
	if replay.Status != 200 || !strings.Contains(replay.Body, `"status":"refunded"`) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("reference replay: %d %v %s, want the current state (refunded), marked replayed", replay.Status, replay.Header, replay.Body)
	}

	refunds := "/v1/payments/" + p.PaymentId + "/refunds"
	r1 := f.do(t, "POST", refunds, `{"amount_minor": 500, "note": "first"}`, "r")
	// note is excluded from the fingerprint: a retry with another note is the same request.
	r2 := f.do(t, "POST", refunds, `{"amount_minor": 500, "note": "retry"}`, "r")
	if r1.Status != 202 || r2.Status != 202 || r2.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal([]byte(r1.Body), []byte(r2.Body)) {
		t.Errorf("marker: first %d %s; replay %d %v %s", r1.Status, r1.Body, r2.Status, r2.Header, r2.Body)
	}
	if n := f.count(t, "refunds"); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	// mismatchStatus is 409 for refunds.
	if a := f.do(t, "POST", refunds, `{"amount_minor": 600}`, "r"); a.Status != 409 || problemCode(t, a) != idemhttp.CodeKeyReused {
		t.Errorf("refund, same key, other amount: %d %s, want 409 key-reused", a.Status, a.Body)
	}
}

// A reference-storage operation that answers 404 has no resource to reload: the default persist
// set stores the 404 whole, a retry gets it back byte for byte (marked replayed) without running
// the handler or Replay<Op>, and nothing leaks the runtime's internals.
func TestReferenceOperationReplaysA404ItStoredWhole(t *testing.T) {
	t.Parallel()
	f := setup(t)
	capture := "/v1/payments/missing/capture"
	first := f.do(t, "POST", capture, `{}`, "c404")
	if first.Status != 404 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("capture of a missing payment: %d %v %s, want a fresh 404", first.Status, first.Header, first.Body)
	}
	// The payment appears meanwhile: a retry must still answer what the first request did.
	if _, err := f.pool.Exec(context.Background(), `INSERT INTO payments (id, amount_minor, currency, status) VALUES ('missing', 1, 'RUB', 'created')`); err != nil {
		t.Fatal(err)
	}
	again := f.do(t, "POST", capture, `{}`, "c404")
	if again.Status != 404 || again.Body != first.Body || again.Header.Get("Idempotent-Replayed") != "true" ||
		again.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
		t.Errorf("retry: %d %v %q, want the stored 404 %q byte for byte, marked replayed", again.Status, again.Header, again.Body, first.Body)
	}
	if n := f.srv.replays.Load(); n != 0 {
		t.Errorf("ReplayCapturePayment ran %d times for an answer stored without a reference, want 0", n)
	}
	var status string
	if err := f.pool.QueryRow(context.Background(), `SELECT status FROM payments WHERE id = 'missing'`).Scan(&status); err != nil || status != "created" {
		t.Errorf("payment status %q, %v: the retry ran the handler again", status, err)
	}
}

// Every payments operation scopes its keys by tenant: a Store without Config.Tenant is a setup
// mistake that NewIdempotentServer reports at once, not a 500 on every request.
func TestNewIdempotentServerPanicsWithoutTenant(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		msg, _ := recover().(string)
		if !strings.HasPrefix(msg, "NewIdempotentServer: ") || !strings.Contains(msg, "POST /v1/payments (createPayment): the scope includes the tenant, but Config.Tenant is nil") {
			t.Errorf("NewIdempotentServer without Config.Tenant panicked with %q; want the tenant misconfiguration named", msg)
		}
	}()
	api.NewIdempotentServer(&server{pool: sch.Pool}, store)
}
