package idemnats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemnats"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// env is one JetStream server with an ORDERS stream, a DEAD stream for dead letters, and a
// PostgreSQL schema whose effects table has no unique constraint: a second run of a handler
// shows as a second row.
type env struct {
	srv  *natsServer
	js   jetstream.JetStream
	sch  *idemtest.Schema
	cons jetstream.Consumer
	n    *idemnats.Consumer
}

func newEnv(t *testing.T, ackWait time.Duration) *env {
	t.Helper()
	e := &env{sch: idemtest.TestSchema(t, nil), srv: startNATS(t)}
	_, e.js = e.srv.connect(t)
	createStream(t, e.js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 100 * time.Millisecond})
	createStream(t, e.js, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := e.js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	e.cons = cons
	if _, err := e.sch.Pool.Exec(ctx, `CREATE TABLE effects (msg_id text NOT NULL, payload text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(e.sch.Pool, e.sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e.n, err = idemnats.New(idemconsume.New(store, &idemconsume.Options{Operation: "orders", Lease: 2 * time.Second}), e.js,
		&idemnats.Options{DeadLetterSubject: "dead.orders", RedeliverDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// publish stores a message with id, waiting out the stream's duplicate window when the server
// took it for a duplicate publish (the test reuses ids on purpose).
func publish(t *testing.T, js jetstream.JetStream, subject, id, payload string, header ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := nats.NewMsg(subject)
		m.Header.Set(nats.MsgIdHdr, id)
		for i := 0; i+1 < len(header); i += 2 {
			m.Header.Set(header[i], header[i+1])
		}
		m.Data = []byte(payload)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ack, err := js.PublishMsg(ctx, m)
		cancel()
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		if !ack.Duplicate {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream still took message %s for a duplicate publish after 10s", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// next fetches one delivery, failing the test when none comes within 10s.
func (e *env) next(t *testing.T) jetstream.Msg {
	t.Helper()
	b, err := e.cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatalf("no delivery within 10s (fetch error: %v)", b.Error())
	return nil
}

// noDelivery checks that the consumer has nothing left to deliver or to be acknowledged.
func (e *env) settled(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		t.Fatalf("consumer: %d messages unacknowledged, %d undelivered; want 0 and 0", info.NumAckPending, info.NumPending)
	}
}

func (e *env) rows(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := e.sch.Pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE msg_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func insert(runs *int) idemnats.Handler {
	return func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error {
		*runs++
		_, err := tx.Exec(ctx, `INSERT INTO effects (msg_id, payload) VALUES ($1, $2)`, msg.Headers().Get(nats.MsgIdHdr), string(msg.Data()))
		return err
	}
}

// TestAckAfterCommit: a consumer that stops after its commit and before its acknowledgement gets
// the message again, which is acknowledged without running the handler.
func TestAckAfterCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 500*time.Millisecond)
	publish(t, e.js, "orders.new", "o-1", `{"amount":10}`)
	runs := 0
	r := e.n.Process(context.Background(), e.next(t), insert(&runs))
	if !r.Ran || r.Action != idemconsume.Ack {
		t.Fatalf("first delivery: %+v; want ran, ack", r)
	}
	// Not settled: the acknowledgement is lost with the consumer. The server redelivers after
	// AckWait.
	msg := e.next(t)
	md, _ := msg.Metadata()
	if md.NumDelivered != 2 {
		t.Fatalf("delivery %d; want the redelivery (2)", md.NumDelivered)
	}
	r = e.n.Handle(context.Background(), msg, insert(&runs))
	if !r.Duplicate || r.Action != idemconsume.Ack {
		t.Fatalf("redelivery of a done message: %+v; want ack, duplicate", r)
	}
	if runs != 1 || e.rows(t, "o-1") != 1 {
		t.Fatalf("handler ran %d times, %d rows; want 1 and 1", runs, e.rows(t, "o-1"))
	}
	e.settled(t)
}

// TestRedeliveryWhileRunning: the acknowledgement deadline passes under a slow handler; the
// redelivery is not run but put back with a delay, and the message is acknowledged once.
func TestRedeliveryWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 300*time.Millisecond)
	publish(t, e.js, "orders.new", "o-2", `{"amount":20}`)
	first := e.next(t)
	release, running := make(chan struct{}), make(chan struct{})
	runs := 0
	done := make(chan idemconsume.Result, 1)
	go func() {
		done <- e.n.Handle(context.Background(), first, func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error {
			close(running)
			<-release
			return insert(&runs)(ctx, tx, msg)
		})
	}()
	<-running
	second := e.next(t) // AckWait passed: the server redelivers while the first still runs
	ran2 := false
	r := e.n.Handle(context.Background(), second, func(context.Context, pgx.Tx, jetstream.Msg) error { ran2 = true; return nil })
	if r.Action != idemconsume.Redeliver || r.Reason != idemconsume.ReasonInProgress || ran2 {
		t.Fatalf("redelivery while the first runs: %+v (ran: %v); want redeliver, in_progress, not run", r, ran2)
	}
	close(release)
	select {
	case r := <-done:
		if !r.Ran || r.Action != idemconsume.Ack {
			t.Fatalf("first delivery: %+v; want ran, ack", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery did not finish within 10s of its release")
	}
	// Whatever the server still delivers is a duplicate, acknowledged without a run.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := e.cons.Info(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("message not acknowledged within 10s: %d pending acknowledgement", info.NumAckPending)
		}
		b, err := e.cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if r := e.n.Handle(context.Background(), m, insert(&runs)); r.Action != idemconsume.Ack || !r.Duplicate {
				t.Fatalf("a later delivery: %+v; want ack, duplicate", r)
			}
		}
	}
	if runs != 1 || e.rows(t, "o-2") != 1 {
		t.Fatalf("handler ran %d times, %d rows; want 1 and 1", runs, e.rows(t, "o-2"))
	}
}

// TestDeadLetter: an id reused with another payload goes to the dead-letter subject with the
// reason in its headers, and is terminated; the first message's effect stays alone.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 500*time.Millisecond)
	publish(t, e.js, "orders.new", "o-3", `{"amount":30}`)
	runs := 0
	if r := e.n.Handle(context.Background(), e.next(t), insert(&runs)); !r.Ran {
		t.Fatalf("first message: %+v; want ran", r)
	}
	// Its publisher asked the server to check the stream: the dead letter's publish, to another
	// stream, must not carry that on.
	publish(t, e.js, "orders.new", "o-3", `{"amount":31}`, nats.ExpectedStreamHdr, "ORDERS", "Trace-Id", "t-31")
	r := e.n.Handle(context.Background(), e.next(t), insert(&runs))
	if r.Action != idemconsume.DeadLetter || r.Reason != idemconsume.ReasonKeyReused {
		t.Fatalf("id reused: %+v; want dead_letter, key_reused", r)
	}
	// A message without an id cannot be told from its redeliveries.
	m := nats.NewMsg("orders.new")
	m.Data = []byte(`{"amount":32}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if r := e.n.Handle(context.Background(), e.next(t), insert(&runs)); r.Action != idemconsume.DeadLetter || r.Reason != idemconsume.ReasonNoMessageID {
		t.Fatalf("message without an id: %+v; want dead_letter, no_message_id", r)
	}
	if runs != 1 || e.rows(t, "o-3") != 1 {
		t.Fatalf("handler ran %d times, %d rows; want 1 and 1", runs, e.rows(t, "o-3"))
	}
	e.settled(t) // terminated messages are not delivered again

	dead, err := e.js.OrderedConsumer(ctx, "DEAD", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ reason, id, data string }{
		{idemconsume.ReasonKeyReused, "o-3", `{"amount":31}`},
		{idemconsume.ReasonNoMessageID, "", `{"amount":32}`},
	}
	for i, w := range want {
		dm, err := dead.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("dead letter %d: %v", i+1, err)
		}
		h := dm.Headers()
		got := fmt.Sprintf("%s %q %s %s %s", h.Get(idemnats.HeaderReason), h.Get(idemnats.HeaderMessageID), dm.Data(), h.Get(idemnats.HeaderStream), h.Get(idemnats.HeaderSubject))
		if exp := fmt.Sprintf("%s %q %s ORDERS orders.new", w.reason, w.id, w.data); got != exp {
			t.Errorf("dead letter %d: %s; want %s", i+1, got, exp)
		}
		if i == 0 && h.Get("Trace-Id") != "t-31" {
			t.Errorf("dead letter %d lost the original's own header Trace-Id: %v", i+1, h)
		}
		if h.Get(idemnats.HeaderError) == "" || h.Get(idemnats.HeaderSequence) == "" || h.Get(idemnats.HeaderSource) != "nats:ORDERS" {
			t.Errorf("dead letter %d lacks its error, sequence or source: %v", i+1, h)
		}
	}
	if _, err := dead.Next(jetstream.FetchMaxWait(300 * time.Millisecond)); !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		t.Fatalf("a third dead letter, or an error: %v; want none", err)
	}
}

// TestProgress: a handler that takes longer than AckWait, with Progress under it, gets no
// redelivery while it runs.
func TestProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	n, err := idemnats.New(idemconsume.New(e.n.Consumer().Store(), nil), e.js, &idemnats.Options{Progress: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, e.js, "orders.new", "o-4", `{"amount":40}`)
	msg := e.next(t)
	done := make(chan idemconsume.Result, 1)
	go func() {
		done <- n.Handle(context.Background(), msg, func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error {
			time.Sleep(2500 * time.Millisecond) // two and a half AckWaits
			runs := 0
			return insert(&runs)(ctx, tx, msg)
		})
	}()
	b, err := e.cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		md, _ := m.Metadata()
		t.Fatalf("a redelivery (delivery %d) while the handler ran with Progress under AckWait", md.NumDelivered)
	}
	select {
	case r := <-done:
		if !r.Ran || r.Action != idemconsume.Ack {
			t.Fatalf("result %+v; want ran, ack", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not finish within 10s")
	}
	e.settled(t)
}
