package idemprom

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/pgbouncertest"
)

// TestListenerDeafGauge: a Store whose listening connection goes through pgbouncer in
// transaction mode (so its LISTEN hears nothing) shows it in the metrics once a duplicate waits.
func TestListenerDeafGauge(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4})
	b := pgbouncertest.Start(t, nil)
	col := New(nil)
	cfg := sch.Config()
	cfg.Observer = col.Observer()
	cfg.ListenConn = func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, b.URLWith(pgx.QueryExecModeExec))
	}
	store, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE charges (id bigint GENERATED ALWAYS AS IDENTITY, key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	p := &idem.DoParams{Scope: "test", Key: "k", Operation: "charge", Fingerprint: "fp", Wait: 30 * time.Second}
	entered, finish := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-finish:
		default:
			close(finish)
		}
	}()
	go store.Do(context.Background(), p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		close(entered)
		<-finish
		return charge("k")(ctx, tx)
	})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request's handler never started")
	}
	dup := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := store.Do(ctx, p, charge("k"))
		dup <- err
	}()
	// The listener records itself deaf (ListenerHealth) a moment before it emits the event that
	// sets the gauge: wait for both.
	deadline := time.Now().Add(15 * time.Second)
	for store.ListenerHealth() == nil || testutil.ToFloat64(col.deaf) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after 15s: the listener behind pgbouncer never reported itself deaf (ListenerHealth %v, gauge %v)",
				store.ListenerHealth(), testutil.ToFloat64(col.deaf))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := testutil.CollectAndCompare(col, strings.NewReader(`
# HELP idemgen_idempotency_listener_deaf 1 while the idempotency store's listener did not hear its own last self-check notification (waiting duplicates poll instead of waking on notifications), else 0.
# TYPE idemgen_idempotency_listener_deaf gauge
idemgen_idempotency_listener_deaf 1
`), ListenerDeaf); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(col.events.WithLabelValues("", string(idem.EventListenerDeaf))); n != 1 {
		t.Errorf("%s{event=%q} = %v; want 1", EventsTotal, idem.EventListenerDeaf, n)
	}
	close(finish)
	select {
	case err := <-dup:
		if err != nil {
			t.Fatalf("the duplicate of a deaf listener's store: %v; want the replay, by polling", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the duplicate did not end: a deaf listener's waiters must poll")
	}
}
