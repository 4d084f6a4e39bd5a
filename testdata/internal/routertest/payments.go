package routertest

// The payments operations of the shared spec: createPayment, whose 201 declares two headers of
// its own (a replay carries them with no replayHeaders list) and whose body is declared as
// application/json; charset=utf-8, and updatePayment, declared as application/merge-patch+json.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"

	"idemgen.test/golden/internal/goldenhttp"
)

// The headers createPayment's 201 declares, and only declares: the policy lists no
// replayHeaders.
const (
	SignatureHeader   = "X-Jws-Signature"
	InteractionHeader = "X-Fapi-Interaction-Id"
)

// The media types the spec declares for the payments bodies.
const (
	PaymentType = "application/json; charset=utf-8"
	PatchType   = "application/merge-patch+json"
)

const paymentsTable = `CREATE TABLE payments (id text PRIMARY KEY, tenant text NOT NULL, amount int NOT NULL, currency text NOT NULL);
	CREATE TABLE refunds (payment_id text NOT NULL, amount int NOT NULL)`

// Payment is the payments resource, as the Backend keeps it.
type Payment struct {
	ID, Currency string
	Amount       int
}

// CreatePayment inserts a payment in tx, in the request's tenant, named after the claimed key.
func (b *Backend) CreatePayment(ctx context.Context, tx pgx.Tx, amount int, currency string) (Payment, error) {
	b.runs.Add(1)
	claim, ok := idem.ClaimFromContext(ctx)
	if !ok {
		return Payment{}, errors.New("routertest: the handler's context carries no claim")
	}
	tenant, err := b.tenant(ctx)
	if err != nil {
		return Payment{}, fmt.Errorf("routertest: the handler's context has no tenant: %w", err)
	}
	p := Payment{ID: tenant + "-" + claim.Key, Amount: amount, Currency: currency}
	_, err = tx.Exec(ctx, `INSERT INTO payments (id, tenant, amount, currency) VALUES ($1, $2, $3, $4)`, p.ID, tenant, p.Amount, p.Currency)
	return p, err
}

// UpdatePayment sets a payment's amount in tx (when amount is set); nil when there is none.
func (b *Backend) UpdatePayment(ctx context.Context, tx pgx.Tx, id string, amount *int) (*Payment, error) {
	b.runs.Add(1)
	if amount != nil {
		if _, err := tx.Exec(ctx, `UPDATE payments SET amount = $2 WHERE id = $1`, id, *amount); err != nil {
			return nil, err
		}
	}
	var p Payment
	err := tx.QueryRow(ctx, `SELECT id, amount, currency FROM payments WHERE id = $1`, id).Scan(&p.ID, &p.Amount, &p.Currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// Sign returns createPayment's two declared headers for p: a signature of the payment, and an
// interaction id that differs on every execution, so a replay that carries it repeats the first
// answer rather than a new one.
func (b *Backend) Sign(p Payment) (signature, interactionID string) {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%s", p.ID, p.Amount, p.Currency))
	return "sig." + hex.EncodeToString(sum[:]), fmt.Sprintf("interaction-%d", b.interactions.Add(1))
}

func (e *env) payments(t *testing.T, tenant string) int {
	t.Helper()
	var n int
	if err := e.b.pool.QueryRow(context.Background(), `SELECT count(*) FROM payments WHERE tenant = $1`, tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sendAs is send with a Content-Type of its own.
func (c *client) sendAs(t *testing.T, method, path, contentType, body string, keys ...string) answer {
	t.Helper()
	h := http.Header{}
	h.Set(TenantHeader, c.tenant)
	for _, k := range keys {
		h.Add("Idempotency-Key", k)
	}
	return goldenhttp.Send(t, method, c.e.url+path, contentType, body, h)
}

const paymentBody = `{"amount": 1200, "currency": "EUR"}`

var paymentCases = []testCase{
	{"declared-headers-replayed", func(t *testing.T, e *env, c *client) {
		first := c.sendAs(t, http.MethodPost, "/v1/payments", PaymentType, paymentBody, "p")
		if first.Status != 201 || first.Replayed() || first.Header.Get(SignatureHeader) == "" || first.Header.Get(InteractionHeader) == "" {
			t.Fatalf("%s: first request: %s %v, want a fresh 201 with %s and %s", e.router, first, first.Header, SignatureHeader, InteractionHeader)
		}
		again := c.sendAs(t, http.MethodPost, "/v1/payments", PaymentType, paymentBody, "p")
		if again.Status != 201 || !again.Replayed() || again.Body != first.Body {
			t.Fatalf("%s: retry answered %s; want the first answer %q, marked replayed", e.router, again, first.Body)
		}
		for _, name := range []string{SignatureHeader, InteractionHeader} {
			if got, want := again.Header.Values(name), first.Header.Values(name); !slices.Equal(got, want) {
				t.Errorf("%s: the replay's %s is %q, the first answer's %q: a header the 201 declares is replayed byte for byte", e.router, name, got, want)
			}
		}
		if n := e.payments(t, c.tenant); n != 1 {
			t.Errorf("%s: %d payments after a replay, want 1", e.router, n)
		}
	}},
	{"media-type-parameters", func(t *testing.T, e *env, c *client) {
		// Declared with a charset parameter, sent with it: accepted, and the same body sent
		// without the parameter is the same request (the fingerprint reads the media type's
		// base only).
		if a := c.sendAs(t, http.MethodPost, "/v1/payments", PaymentType, paymentBody, "p"); a.Status != 201 || a.Replayed() {
			t.Fatalf("%s: a body sent as the declared %q: %s, want a fresh 201", e.router, PaymentType, a)
		}
		if a := c.sendAs(t, http.MethodPost, "/v1/payments", "application/json", paymentBody, "p"); a.Status != 201 || !a.Replayed() {
			t.Errorf("%s: the same body as application/json: %s, want the replayed 201", e.router, a)
		}
		// Declared without parameters, sent with one.
		if a := c.sendAs(t, http.MethodPost, "/v1/orders", "application/json; charset=utf-8", orderBody, "o"); a.Status != 201 || a.Replayed() {
			t.Errorf("%s: createOrder (declared application/json) sent as application/json; charset=utf-8: %s, want a fresh 201", e.router, a)
		}
		if a := c.sendAs(t, http.MethodPost, "/v1/orders", "application/json", orderBody, "o"); a.Status != 201 || !a.Replayed() {
			t.Errorf("%s: the same order as application/json: %s, want the replayed 201", e.router, a)
		}
		// A JSON media type of its own, with and without a parameter.
		patch := "/v1/payments/" + c.tenant + "-p"
		first := c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": 1300}`, "u")
		if first.Status != 200 || first.Replayed() || first.Body == "" {
			t.Fatalf("%s: a merge patch sent as %s: %s, want a fresh 200", e.router, PatchType, first)
		}
		if a := c.sendAs(t, http.MethodPatch, patch, PatchType+"; charset=utf-8", `{ "amount" : 1300 }`, "u"); a.Status != 200 || !a.Replayed() || a.Body != first.Body {
			t.Errorf("%s: the same patch as %s; charset=utf-8: %s, want the first answer %q replayed", e.router, PatchType, a, first.Body)
		}
		if n := e.payments(t, c.tenant); n != 1 {
			t.Errorf("%s: %d payments, want 1", e.router, n)
		}
	}},
	{"undeclared-media-type-415", func(t *testing.T, e *env, c *client) {
		c.problem(t, "a payment sent as text/plain", c.sendAs(t, http.MethodPost, "/v1/payments", "text/plain", paymentBody, "p"), 415, "media-type-unsupported")
		if a := c.sendAs(t, http.MethodPost, "/v1/payments", PaymentType, paymentBody, "p"); a.Status != 201 || a.Replayed() {
			t.Errorf("%s: the key after a refused media type: %s, want a fresh 201 (nothing was claimed)", e.router, a)
		}
	}},
}

// Refund records a refund of amount in tx and returns it.
func (b *Backend) Refund(ctx context.Context, tx pgx.Tx, paymentID string, amount int) (int, error) {
	b.runs.Add(1)
	_, err := tx.Exec(ctx, `INSERT INTO refunds (payment_id, amount) VALUES ($1, $2)`, paymentID, amount)
	return amount, err
}

func (e *env) refunds(t *testing.T, paymentID string) int {
	t.Helper()
	var n int
	if err := e.b.pool.QueryRow(context.Background(), `SELECT count(*) FROM refunds WHERE payment_id = $1`, paymentID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var refundCases = []testCase{
	{"media-type-declared-twice", func(t *testing.T, e *env, c *client) {
		// createRefund declares application/json and application/json; charset=utf-8: a body sent
		// as the second matches both, and is bound for each.
		refunds := "/v1/payments/" + c.tenant + "-p/refunds"
		first := c.sendAs(t, http.MethodPost, refunds, PaymentType, `{"amount": 5}`, "r")
		if first.Status != 201 || first.Replayed() {
			t.Fatalf("%s: a refund sent as %s, declared twice: %s, want a fresh 201", e.router, PaymentType, first)
		}
		if a := c.sendAs(t, http.MethodPost, refunds, "application/json", `{"amount": 5}`, "r"); a.Status != 201 || !a.Replayed() || a.Body != first.Body {
			t.Errorf("%s: the same refund as application/json: %s, want the first answer %q replayed", e.router, a, first.Body)
		}
		if a := c.sendAs(t, http.MethodPost, refunds, PaymentType, `{"amount": 6}`, "r2"); a.Status != 201 || a.Replayed() || a.Body == first.Body {
			t.Errorf("%s: another refund sent as %s: %s, want a fresh 201 of its own", e.router, PaymentType, a)
		}
		if n := e.refunds(t, c.tenant+"-p"); n != 2 {
			t.Errorf("%s: %d refunds, want 2", e.router, n)
		}
	}},
}
