package payments

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// TestOapiCodegenWiringAnswersAProblem: the wiring oapi-codegen documents for a strict server,
// HandlerWithOptions(NewStrictHandler(…), …), skips the body capture the fingerprint needs.
// Such a server must not answer Go text: every idempotent request with a body gets a 500
// problem that names the generated wiring to use, claims nothing and runs no handler, and the
// log says the same to the operator.
func TestOapiCodegenWiringAnswersAProblem(t *testing.T) {
	t.Parallel()
	schema := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := schema.Config()
	cfg.Tenant = tenantForStore
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	store, err := idem.NewStore(schema.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	// As oapi-codegen's documentation wires a strict server: no options, no capture.
	h := api.HandlerWithOptions(api.NewStrictHandler(api.NewIdempotentServer(&payments{db: schema.Pool}, store), nil), api.StdHTTPServerOptions{})
	srv := httptest.NewServer(OuterHandler(schema.Pool, slog.New(slog.NewTextHandler(io.Discard, nil)), h, nil))
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, client: srv.Client(), schema: schema}

	for range 2 { // a retry is answered the same way: nothing was claimed
		p := wantProblem(t, "create through oapi-codegen's wiring", e.send(create("acme", "k-wiring", body19900)), http.StatusInternalServerError, "internal")
		if !strings.Contains(p.Detail, "NewIdempotentHandler") || strings.Contains(p.Detail, "idem:") {
			t.Errorf("problem detail %q; want it to name NewIdempotentHandler, without Go error text", p.Detail)
		}
	}
	if n := e.count("SELECT count(*) FROM payments"); n != 0 {
		t.Errorf("%d payments; want 0: the handler must not run without a fingerprint", n)
	}
	if n := e.keyRows(); n != 0 {
		t.Errorf("%d key rows; want 0: nothing may be claimed without a fingerprint", n)
	}
	if !strings.Contains(logs.String(), "NewIdempotentHandler") || !strings.Contains(logs.String(), "operation=createPayment") {
		t.Errorf("the log does not name the fix and the operation:\n%s", logs.String())
	}
}
