package idem_test

import (
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A queue consumer makes message handling idempotent with Do: the message id is the key, and
// the stored outcome is returned for a redelivered message instead of charging twice.
func ExampleStore_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := idem.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	store, err := idem.NewStore(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	msg := struct{ ID, Account string }{"msg-42", "acct-7"}
	fp := idem.NewFingerprinter("consume charge")
	if err := fp.Body(msg); err != nil {
		log.Fatal(err)
	}
	res, err := store.Do(ctx, &idem.DoParams{
		Scope: "charges", Key: msg.ID, Operation: "charge", Fingerprint: fp.Sum(), TTL: 7 * 24 * time.Hour,
	}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		_, err := tx.Exec(ctx, "INSERT INTO charges (account, amount) VALUES ($1, 100)", msg.Account)
		return nil, err // only the side effect matters; nothing to replay
	})
	switch {
	case err != nil:
		log.Printf("redeliver later: %v", err) // ErrInProgress, ErrStoreUnavailable, or the charge failed
	case res.Replayed:
		log.Printf("already charged")
	}
}

// What a generated adapter does for one operation, written by hand: fingerprint the request,
// Serve it, write the result (the handler's answer, a replay or a problem).
func ExampleStore_Serve() {
	var store *idem.Store // from idem.NewStore
	policy := &idem.Policy{
		Operation: "createPayment",
		Route:     "POST /v1/payments",
		Persist:   idem.Statuses("2xx", "4xx"),
		Key:       idem.KeyRule{Header: "Idempotency-Key", Required: true},
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
		res, err := store.Serve(r.Context(), policy, &idem.Request{
			KeyValues:   r.Header.Values("Idempotency-Key"),
			Scope:       []idem.ScopePart{{Name: "operation", Value: policy.Operation}},
			Fingerprint: fp.Sum(),
		}, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			var id int64
			if err := tx.QueryRow(ctx, "INSERT INTO payments (amount, currency) VALUES ($1, $2) RETURNING id",
				body.Amount, body.Currency).Scan(&id); err != nil {
				return nil, err
			}
			rec := idem.NewRecorder()
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
