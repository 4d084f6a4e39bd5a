package idemhttp_test

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// What a generated adapter does for one operation, written by hand: fingerprint the request,
// Serve it, write the result (the handler's answer, a replay or a problem).
func ExampleServe() {
	var store *idem.Store // from idem.NewStore
	policy := &idemhttp.Policy{
		Operation: "createPayment",
		Route:     "POST /v1/payments",
		Persist:   idem.Statuses("2xx", "4xx"),
		Key:       idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
	}
	http.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Amount   int    `json:"amount"`
			Currency string `json:"currency"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fp := idem.NewFingerprinter(policy.Route)
		if err := fp.Body(body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res, err := idemhttp.Serve(r.Context(), store, policy, &idemhttp.Request{
			KeyValues:   r.Header.Values("Idempotency-Key"),
			Scope:       []idemhttp.ScopePart{{Name: "operation", Value: policy.Operation}},
			Fingerprint: fp.Sum(),
		}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			var id int64
			if err := tx.QueryRow(ctx, "INSERT INTO payments (amount, currency) VALUES ($1, $2) RETURNING id",
				body.Amount, body.Currency).Scan(&id); err != nil {
				return nil, err
			}
			rec := idemhttp.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			rec.WriteHeader(http.StatusCreated)
			json.NewEncoder(rec).Encode(map[string]any{"id": id, "amount": body.Amount})
			return rec.Outcome(), nil
		})
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		res.WriteTo(w)
	})
}
