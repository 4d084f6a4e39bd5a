package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// TestUncertainIsOperationUncertain: idem.ErrUncertain from the runtime is the 409
// operation-uncertain refusal, without Retry-After (no retry can settle the key), written through
// the server's Renderer like every refusal, with the operation's echo headers, and logged as a
// refusal at debug level naming the code and the operation. ErrorProblem maps it the same way for
// an error handler. Check refuses UncertainOnLoss on transaction claims.
func TestUncertainIsOperationUncertain(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	e := newEnv(t, &idem.Config{Logger: newDebugLogger(&logs)}, nil)
	p := &idemhttp.Policy{
		Operation: "createPayment", Route: "POST /v1/payments",
		Key:         idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
		EchoHeaders: []string{"X-Interaction-Id"},
		History:     true, UncertainOnLoss: true,
	}
	if err := idemhttp.Check(e.Store, p); err != nil {
		t.Fatalf("Check refused a lease policy with UncertainOnLoss: %v", err)
	}
	tx := *p
	tx.Claim = idem.ClaimTransaction
	if err := idemhttp.Check(e.Store, &tx); err == nil || !strings.Contains(err.Error(), "UncertainOnLoss needs lease claims") {
		t.Errorf("Check(UncertainOnLoss, ClaimTransaction) = %v; want the lease requirement", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		res, err := idemhttp.Handle(r.Context(), e.Store, p, &idemhttp.Op[answer]{
			Key:   r.Header.Get("Idempotency-Key"),
			Scope: []idemhttp.Part{{Name: "operation"}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				// What Do answers for a key whose earlier attempt was lost after a provider call.
				return answer{}, idem.ErrUncertain
			},
			Record: func(a answer) (*idem.Outcome, error) { return &idem.Outcome{Status: a.status}, nil },
		})
		if err != nil {
			idemhttp.ResponseErrorHandler(e.Store)(w, r, err)
			return
		}
		_ = res.WriteTo(w)
	})
	srv := httptest.NewServer(idemhttp.CaptureWith(e.Store, []*idemhttp.Policy{p}, idemhttp.CaptureOptions{
		Renderer: apiRenderer("application/vnd.api+json"),
	})(mux))
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest("POST", srv.URL+"/v1/payments", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-uncertain")
	req.Header.Set("X-Interaction-Id", "i-1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body apiError
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusConflict || body.Code != "API.operation-uncertain" ||
		resp.Header.Get("Content-Type") != "application/vnd.api+json" {
		t.Errorf("answered %d %s %+v; want 409 API.operation-uncertain through the renderer", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	for _, want := range []string{"operator or a reconciliation", "retrying will not help"} {
		if !strings.Contains(body.Detail, want) {
			t.Errorf("detail %q does not say %q", body.Detail, want)
		}
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		t.Errorf("Retry-After %q; want none: a retry cannot settle an uncertain key", ra)
	}
	if resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("X-Interaction-Id") != "i-1" {
		t.Errorf("headers %v; want Cache-Control: no-store and the echoed X-Interaction-Id", resp.Header)
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"idem: request refused"`) || !strings.Contains(l, `"code":"operation-uncertain"`) ||
		!strings.Contains(l, `"operation":"createPayment"`) {
		t.Errorf("no debug refusal record naming operation-uncertain and the operation in:\n%s", l)
	}

	prob := idemhttp.ErrorProblem(errors.Join(errors.New("x"), idem.ErrUncertain))
	if prob == nil || prob.Code != idemhttp.CodeOperationUncertain || prob.Status != http.StatusConflict || prob.RetryAfter != 0 ||
		prob.Title != "The outcome of an earlier attempt is uncertain" {
		t.Errorf("ErrorProblem(ErrUncertain) = %+v; want 409 operation-uncertain without Retry-After", prob)
	}
}
