package idemtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// paymentsHandler is what a generated adapter does for POST /v1/payments, written by hand: parse,
// fingerprint the typed request, Serve, write the result.
func paymentsHandler(store *idem.Store, forget bool) http.Handler {
	policy := &idemhttp.Policy{
		Operation: "createPayment", Route: "POST /v1/payments", Lease: 5 * time.Second,
		Key: idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Amount   int    `json:"amount"`
			Currency string `json:"currency"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f := idem.NewFingerprinter(policy.Route)
		if err := f.Body(req); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		key := r.Header.Values("Idempotency-Key")
		if forget {
			key = []string{fmt.Sprint(time.Now().UnixNano())} // a broken adapter: a new key every time
		}
		res, err := idemhttp.Serve(r.Context(), store, policy, &idemhttp.Request{
			KeyValues:   key,
			Scope:       []idemhttp.ScopePart{{Name: "operation", Value: policy.Operation}},
			Fingerprint: f.Sum(),
		}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			c, _ := idem.ClaimFromContext(ctx)
			var id int64
			if err := tx.QueryRow(ctx, "INSERT INTO payments (key, amount) VALUES ($1, $2) RETURNING id", c.Key, req.Amount).Scan(&id); err != nil {
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
			rec := idemhttp.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			rec.Header().Set("Set-Cookie", "session=abc")
			rec.WriteHeader(http.StatusCreated)
			fmt.Fprintf(rec, `{"id":%d,"amount":%d}`, id, req.Amount)
			return rec.Outcome(), nil
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res.WriteTo(w)
	})
}

func setup(t *testing.T) (*idem.Store, idemtest.Operation) {
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 20})
	if _, err := sch.Pool.Exec(context.Background(), "CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY, key text, amount int)"); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	return store, idemtest.Operation{
		Method:    "POST",
		Path:      "/v1/payments",
		Header:    http.Header{"Content-Type": {"application/json"}},
		Body:      []byte(`{"amount": 100, "currency": "EUR"}`),
		OtherBody: []byte(`{"amount": 200, "currency": "EUR"}`),
		Effects: func(tb testing.TB) int {
			var n int
			if err := sch.Pool.QueryRow(context.Background(), "SELECT count(*) FROM payments").Scan(&n); err != nil {
				tb.Fatal(err)
			}
			return n
		},
	}
}

func TestConformanceOfAHandWrittenAdapter(t *testing.T) {
	t.Parallel()
	store, op := setup(t)
	idemtest.Conformance(t, paymentsHandler(store, false), op)
}

// recordingTB stands in for a test that is expected to fail: it records failures instead.
type recordingTB struct {
	testing.TB
	failures []string
}

type stop struct{}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Errorf(format string, a ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, a...))
}
func (r *recordingTB) Fatalf(format string, a ...any) { r.Errorf(format, a...); panic(stop{}) }
func (r *recordingTB) Fatal(a ...any)                 { r.Errorf("%s", fmt.Sprint(a...)); panic(stop{}) }

// The kit must catch an adapter that breaks idempotency.
func TestConformanceCatchesABrokenAdapter(t *testing.T) {
	t.Parallel()
	store, op := setup(t)
	op.Concurrency = 4
	failed := map[string]bool{}
	for _, c := range idemtest.ConformanceChecks(paymentsHandler(store, true), op) {
		r := &recordingTB{TB: t}
		func() {
			defer func() {
				if p := recover(); p != nil && p != (stop{}) {
					panic(p)
				}
			}()
			c.Run(r)
		}()
		failed[c.Name] = len(r.failures) > 0
	}
	for _, name := range []string{"key-missing", "replay", "concurrent duplicates"} {
		if !failed[name] {
			t.Errorf("check %q passed an adapter that sends a new key with every request", name)
		}
	}
}
