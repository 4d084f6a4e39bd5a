package idemnats_test

import (
	"context"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemnats"
)

// A consumer of the ORDERS stream that settles each order once, however often JetStream delivers
// its message, and sets messages it cannot handle aside on dead.orders (a subject a stream
// captures).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres:///shop")
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.NewStore(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "ORDERS", "settle")
	if err != nil {
		log.Fatal(err)
	}
	// The key outlives the stream's MaxAge (7 days here): a message redelivered or republished
	// within it is recognised.
	consumer := idemconsume.New(store, &idemconsume.Options{Operation: "settle-order", TTL: 8 * 24 * time.Hour})
	n, err := idemnats.New(consumer, js, &idemnats.Options{DeadLetterSubject: "dead.orders"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = cons.Consume(func(msg jetstream.Msg) {
		n.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error {
			_, err := tx.Exec(ctx, `UPDATE orders SET state = 'settled' WHERE id = $1`, string(msg.Data()))
			return err
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}
