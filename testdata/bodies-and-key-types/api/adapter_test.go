package api_test

// Behaviour of the generated adapter for a key header typed as a UUID, a body sent as JSON or as a
// form, and a claim made inside the business transaction. internal/cli's TestGenerateGolden runs
// it on the PostgreSQL of TEST_DATABASE_URL.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"

	"idemgen.test/golden/bodies-and-key-types/api"
	"idemgen.test/golden/internal/goldenhttp"
)

type server struct{}

func (server) Donate(ctx context.Context, tx pgx.Tx, req api.DonateRequestObject) (api.DonateResponseObject, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO donations (campaign) VALUES ($1)`, req.Params.Campaign); err != nil {
		return nil, err
	}
	return api.Donate201Response{}, nil
}

func (server) PutPledge(ctx context.Context, tx pgx.Tx, req api.PutPledgeRequestObject) (api.PutPledgeResponseObject, error) {
	return api.PutPledge200Response{}, nil
}

func TestUUIDKeyFormBodyAndTransactionClaim(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE donations (campaign text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, &idem.Config{
		Schema: sch.Name,
		Tenant: func(context.Context) (string, error) { return "t", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := api.HandlerWithOptions(api.NewStrictHandler(api.NewIdempotentServer(server{}, store), nil),
		api.StdHTTPServerOptions{ErrorHandlerFunc: api.IdempotencyParamErrorHandler})
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	post := func(contentType, body, key string) (int, string) {
		h := http.Header{}
		if key != "" {
			h.Set("Idempotency-Key", key)
		}
		a := goldenhttp.Send(t, "POST", hs.URL+"/donations?campaign=trees", contentType, body, h)
		if a.Status == 400 {
			return a.Status, goldenhttp.ProblemCode(t, a)
		}
		return a.Status, a.Header.Get("Idempotent-Replayed")
	}

	const key = "0b6f2c9e-3a7d-4f1e-9c2b-5d8e7f6a1b2c"
	if status, code := post("application/json", `{"amount_minor": 5}`, "not-a-uuid"); status != 400 || code != idemhttp.CodeKeyInvalid {
		t.Errorf("malformed UUID key: %d %q, want 400 key-invalid (through IdempotencyParamErrorHandler)", status, code)
	}
	if status, code := post("application/json", `{"amount_minor": 5}`, ""); status != 400 || code != idemhttp.CodeKeyMissing {
		t.Errorf("no key: %d %q, want 400 key-missing", status, code)
	}
	if status, replayed := post("application/json", `{"amount_minor": 5}`, key); status != 201 || replayed != "" {
		t.Errorf("first: %d replayed=%q", status, replayed)
	}
	// The same donation sent as a form is the same typed request.
	if status, replayed := post("application/x-www-form-urlencoded", "amount_minor=5", key); status != 201 || replayed != "true" {
		t.Errorf("form retry: %d replayed=%q, want a replay", status, replayed)
	}
	var n int
	if err := sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM donations`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d donations (%v), want 1", n, err)
	}
}
