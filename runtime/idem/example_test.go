package idem_test

import (
	"context"
	"log"
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
	migrator, err := idem.NewMigrator(pool, nil) // the same Config as NewStore's
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, idem.DirectionUp, nil); err != nil {
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
