package idemnats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemnats"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/proctest"
)

// The storm's consumers are this test binary run again as separate processes, so that the test
// can kill one by its PID at a chosen point (mid-handler, after the commit and before the
// acknowledgement), as a crash or an OOM kill would.
const (
	childEnv      = "IDEMNATS_STORM_CONSUMER"
	childNATS     = "IDEMNATS_STORM_NATS"
	childDB       = "IDEMNATS_STORM_DB"
	childSchema   = "IDEMNATS_STORM_SCHEMA"
	stormAckWait  = time.Second
	stormLease    = 2 * time.Second
	stormSlowness = 1500 * time.Millisecond // longer than AckWait: the server redelivers meanwhile
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(stormConsumer())
	}
	os.Exit(m.Run())
}

// stormPayload is a storm message's body: Kill says where the consumer handling it is killed
// (once per message), Slow makes its first run outlast the acknowledgement deadline.
type stormPayload struct {
	N    int    `json:"n"`
	Kill string `json:"kill,omitempty"` // "mid" (in the handler, before its commit) or "committed" (after the commit, before the ack)
	Slow bool   `json:"slow,omitempty"`
	Note string `json:"note,omitempty"`
}

// stormConsumer is one consumer process: it handles ORDERS messages with idemnats until it is
// killed, and reports each step on stdout, one line each, for the test to count.
func stormConsumer() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "storm consumer:", err); return 1 }
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(childDB))
	if err != nil {
		return fail(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = os.Getenv(childSchema)
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	store, err := idem.NewStore(pool, &idem.Config{Schema: os.Getenv(childSchema), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(err)
	}
	nc, err := nats.Connect(os.Getenv(childNATS))
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	cons, err := js.Consumer(ctx, "ORDERS", "workers")
	if err != nil {
		return fail(err)
	}
	n, err := idemnats.New(idemconsume.New(store, &idemconsume.Options{Operation: "orders", Lease: stormLease}), js,
		&idemnats.Options{DeadLetterSubject: "dead.orders", RedeliverDelay: 200 * time.Millisecond})
	if err != nil {
		return fail(err)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
	}
	// killOnce reports whether this is the one time msg's consumer is killed at point.
	killOnce := func(id, point string) bool {
		tag, err := pool.Exec(ctx, `INSERT INTO kills (msg_id, point) VALUES ($1, $2) ON CONFLICT DO NOTHING`, id, point)
		return err == nil && tag.RowsAffected() == 1
	}
	_, err = cons.Consume(func(msg jetstream.Msg) {
		id := msg.Headers().Get(nats.MsgIdHdr)
		md, err := msg.Metadata()
		if err != nil {
			say("error metadata %v", err)
			return
		}
		var p stormPayload
		_ = json.Unmarshal(msg.Data(), &p)
		say("got %s %d", id, md.NumDelivered)
		r := n.Process(ctx, msg, func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) error {
			if _, err := tx.Exec(ctx, `INSERT INTO effects (msg_id, payload, pid) VALUES ($1, $2, $3)`, id, string(msg.Data()), os.Getpid()); err != nil {
				return err
			}
			if p.Kill == "mid" && killOnce(id, "mid") {
				say("kill mid %s", id)
				time.Sleep(time.Hour) // the test kills this process now: the row above is not committed
			}
			if p.Slow && md.NumDelivered == 1 {
				time.Sleep(stormSlowness)
			}
			return nil
		})
		if r.Ran && p.Kill == "committed" && killOnce(id, "committed") {
			say("kill committed %s", id)
			time.Sleep(time.Hour) // the test kills this process now: committed, never acknowledged
		}
		if err := n.Settle(ctx, msg, r); err != nil {
			say("settle-error %s %v", id, err)
		}
		reason := r.Reason
		if reason == "" {
			reason = "-"
		}
		say("settled %s %d %s %s ran=%t duplicate=%t", id, md.NumDelivered, r.Action, reason, r.Ran, r.Duplicate)
	}, jetstream.PullMaxMessages(4))
	if err != nil {
		return fail(err)
	}
	say("ready")
	time.Sleep(time.Hour)
	return 0
}

// stormCounts are the storm's numbers, from the consumers' lines.
type stormCounts struct {
	mu                                            sync.Mutex
	deliveries, redeliveries                      int
	killedMid, killedCommitted                    int
	ackedRan, ackedDuplicate, naked, deadLettered int
	reasons                                       map[string]int
	lines                                         []string // the last lines, for a failure message
}

func (c *stormCounts) line(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, s)
	if len(c.lines) > 60 {
		c.lines = c.lines[1:]
	}
	f := strings.Fields(s)
	switch {
	case len(f) == 3 && f[0] == "got":
		c.deliveries++
		if f[2] != "1" {
			c.redeliveries++
		}
	case len(f) == 3 && f[0] == "kill" && f[1] == "mid":
		c.killedMid++
	case len(f) == 3 && f[0] == "kill" && f[1] == "committed":
		c.killedCommitted++
	case len(f) >= 7 && f[0] == "settled":
		switch {
		case f[3] == "ack" && f[5] == "ran=true":
			c.ackedRan++
		case f[3] == "ack":
			c.ackedDuplicate++
		case f[3] == "redeliver":
			c.naked++
			c.reasons[f[4]]++
		case f[3] == "dead_letter":
			c.deadLettered++
		}
	}
}

// TestStormKilledConsumers: 3 consumer processes handle a stream with a short acknowledgement
// deadline while the test kills them mid-handler and after their commit (before their
// acknowledgement), some handlers outlast the deadline, publishers send some messages again and
// reuse some ids with another payload. Every message has exactly one effect, none is lost, and
// the reused ids are dead-lettered.
func TestStormKilledConsumers(t *testing.T) {
	t.Parallel()
	const (
		unique    = 60
		instances = 3
	)
	// The consumers' pools and listeners are outside the schema's pool: reserve room for them.
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 2 + instances*4})
	srv := startNATS(t)
	_, js := srv.connect(t)
	createStream(t, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 100 * time.Millisecond})
	dead := createStream(t, js, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"dead.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: stormAckWait})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sch.Pool.Exec(ctx, `CREATE TABLE effects (msg_id text NOT NULL, payload text NOT NULL, pid int NOT NULL);
		CREATE TABLE kills (msg_id text NOT NULL, point text NOT NULL, PRIMARY KEY (msg_id, point))`); err != nil {
		t.Fatal(err)
	}

	cancel()
	ctx = context.Background() // the storm's own deadline bounds what follows

	id := func(i int) string { return fmt.Sprintf("order-%03d", i) }
	payloads := map[string]string{}
	wantKills := map[string]int{}
	for i := range unique {
		p := stormPayload{N: i}
		switch i % 10 {
		case 3:
			p.Kill = "mid"
		case 6:
			p.Kill = "committed"
		case 8:
			p.Slow = true
		}
		wantKills[p.Kill]++
		b, _ := json.Marshal(p)
		payloads[id(i)] = string(b)
		publish(t, js, "orders.new", id(i), string(b))
	}

	counts := &stormCounts{reasons: map[string]int{}}
	fleet := proctest.New(t, "consumer", []string{childEnv + "=1", childNATS + "=" + srv.URL, childDB + "=" + sch.URL, childSchema + "=" + sch.Name}, counts.line)
	for range instances {
		fleet.Start()
	}

	// Publishers that retry past JetStream's duplicate window: 3 ids sent again with the same
	// payload (duplicates, acknowledged without a run), 3 reused with another payload (dead
	// letters). They are sent once their first message is done, so the first one is the one kept.
	extras := map[string]string{}
	for _, i := range []int{0, 1, 2} {
		extras[id(i)] = payloads[id(i)]
	}
	for _, i := range []int{4, 5, 7} {
		b, _ := json.Marshal(stormPayload{N: i, Note: "another order under a reused id"})
		extras[id(i)] = string(b)
	}
	const reused = 3
	published := map[string]bool{}

	deadline := time.Now().Add(2 * time.Minute)
	var rows, distinct int
	for {
		select {
		case pid := <-fleet.Kills:
			fleet.Kill(pid) // by its PID, at the point it reported
			fleet.Start()
			continue
		case <-time.After(100 * time.Millisecond):
		}
		for ex, payload := range extras {
			if published[ex] {
				continue
			}
			var done bool
			if err := sch.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM effects WHERE msg_id = $1)`, ex).Scan(&done); err != nil {
				t.Fatal(err)
			}
			if done {
				publish(t, js, "orders.new", ex, payload)
				published[ex] = true
			}
		}
		if err := sch.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id) FROM effects`).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		ictx, icancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := cons.Info(ictx)
		var deadInfo *jetstream.StreamInfo
		if err == nil {
			deadInfo, err = dead.Info(ictx)
		}
		icancel()
		if err != nil {
			t.Fatal(err)
		}
		if distinct == unique && len(published) == len(extras) && info.NumAckPending == 0 && info.NumPending == 0 && deadInfo.State.Msgs == reused {
			break
		}
		if time.Now().After(deadline) {
			counts.mu.Lock()
			last := strings.Join(counts.lines, "\n")
			counts.mu.Unlock()
			t.Fatalf("the storm did not settle within 2 minutes: %d of %d messages have an effect, %d of %d extra messages published, "+
				"%d unacknowledged and %d undelivered, %d of %d dead letters; the consumers' last lines:\n%s%s",
				distinct, unique, len(published), len(extras), info.NumAckPending, info.NumPending, deadInfo.State.Msgs, reused, last, fleet.StderrTails())
		}
	}

	counts.mu.Lock()
	defer counts.mu.Unlock()
	messages := unique + len(extras)
	t.Logf("NATS JetStream storm: %d messages (%d ids, %d sent again by a publisher, %d ids reused with another payload), %d consumer processes started (%d at once), AckWait %s, lease %s",
		messages, unique, len(extras)-reused, reused, fleet.Started(), instances, stormAckWait, stormLease)
	t.Logf("deliveries handled %d (redeliveries among them %d), consumers killed mid-handler %d, killed after commit before ack %d",
		counts.deliveries, counts.redeliveries, counts.killedMid, counts.killedCommitted)
	t.Logf("acked after a run %d (the %d others that ran were killed before their ack), acked as duplicates without a run %d, put back for later %d %v, dead-letter decisions %d (a redelivered dead letter is published again under the same Nats-Msg-Id), dead letters in the DEAD stream %d",
		counts.ackedRan, counts.killedCommitted, counts.ackedDuplicate, counts.naked, counts.reasons, counts.deadLettered, reused)
	t.Logf("effects %d rows for %d ids (doubled %d), lost %d", rows, distinct, rows-distinct, unique-distinct)

	if rows != unique || distinct != unique {
		t.Errorf("%d effect rows for %d ids; want exactly one per message (%d)", rows, distinct, unique)
	}
	if counts.killedMid != wantKills["mid"] || counts.killedCommitted != wantKills["committed"] {
		t.Errorf("killed %d mid-handler and %d after commit; want %d and %d", counts.killedMid, counts.killedCommitted, wantKills["mid"], wantKills["committed"])
	}
	// Each message whose consumer was killed after its commit is acknowledged by a redelivery
	// that finds it done, as is each message a publisher sent again.
	if min := wantKills["committed"] + len(extras) - reused; counts.ackedDuplicate < min {
		t.Errorf("%d duplicates acknowledged without a run; want at least %d", counts.ackedDuplicate, min)
	}
	var effects []struct{ id, payload string }
	rs, err := sch.Pool.Query(ctx, `SELECT msg_id, payload FROM effects`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var e struct{ id, payload string }
		if err := rs.Scan(&e.id, &e.payload); err != nil {
			t.Fatal(err)
		}
		effects = append(effects, e)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	for _, e := range effects {
		if payloads[e.id] != e.payload {
			t.Errorf("effect of %s has payload %s; want the first message's, %s", e.id, e.payload, payloads[e.id])
		}
	}
	dl, err := dead.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range reused {
		m, err := dl.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("dead letter %d: %v", i+1, err)
		}
		h := m.Headers()
		if h.Get(idemnats.HeaderReason) != idemconsume.ReasonKeyReused || extras[h.Get(idemnats.HeaderMessageID)] != string(m.Data()) {
			t.Errorf("dead letter %d: reason %q, id %q, payload %s; want key_reused and a reused id's second payload",
				i+1, h.Get(idemnats.HeaderReason), h.Get(idemnats.HeaderMessageID), m.Data())
		}
	}
}
