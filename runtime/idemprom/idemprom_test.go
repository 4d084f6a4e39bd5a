package idemprom

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// env is one test's schema, a store observed by a fresh Collector, and the registry to read.
type env struct {
	t     *testing.T
	sch   *idemtest.Schema
	store *idem.Store
	col   *Collector
	reg   *prometheus.Registry
}

func newEnv(t *testing.T, opts *Options) *env {
	t.Helper()
	sch := idemtest.TestSchema(t, nil)
	col := New(opts)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(col); err != nil {
		t.Fatalf("register the collector: %v", err)
	}
	cfg := sch.Config()
	cfg.Observer = col.Observer()
	store, err := idem.NewStore(sch.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE charges (id bigint GENERATED ALWAYS AS IDENTITY, key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, sch: sch, store: store, col: col, reg: reg}
}

func params(op, key, fp string) *idem.DoParams {
	return &idem.DoParams{Scope: "test", Key: key, Operation: op, Fingerprint: fp}
}

// charge is a handler that writes one business row and stores a 201.
func charge(key string) func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := tx.Exec(ctx, `INSERT INTO charges (key) VALUES ($1)`, key); err != nil {
			return nil, err
		}
		return &idem.Outcome{Status: 201, Body: []byte(`{"ok":true}`)}, nil
	}
}

// values reads every counter and gauge series of the registry as "name{label=value,…}" → value,
// and every histogram as "name{…} count" → its sample count, leaving out series at zero so that
// a test lists exactly what moved.
func (e *env) values() map[string]float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Histogram != nil:
				name += " count"
				v = float64(m.Histogram.GetSampleCount())
			}
			if v != 0 {
				out[name] = v
			}
		}
	}
	return out
}

func (e *env) expect(want map[string]float64) {
	e.t.Helper()
	got := e.values()
	var diff []string
	for k, w := range want {
		if got[k] != w {
			diff = append(diff, fmt.Sprintf("%s = %v, want %v", k, got[k], w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s = %v, want no such series (or 0)", k, g))
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		e.t.Errorf("metrics differ:\n  %s", strings.Join(diff, "\n  "))
	}
}

func (e *env) inFlight(op string) float64 {
	return testutil.ToFloat64(e.col.inFlight.WithLabelValues(op))
}

const (
	evt = EventsTotal + "{event="
	dur = HandlerDuration + "{operation=charge,outcome="
	ifl = KeysInFlight + "{operation=charge}"
)

func ev(kind idem.EventKind) string { return evt + string(kind) + ",operation=charge}" }

// TestMetricsOfEachOutcome drives a real Store through a first request, a replay, a duplicate
// while the first is in flight, a reused key and a handler error, and reads exact values.
func TestMetricsOfEachOutcome(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()

	// First request, and the in-flight gauge while its handler runs.
	var during float64
	if _, err := e.store.Do(ctx, params("charge", "k1", "fp1"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		during = e.inFlight("charge")
		return charge("k1")(ctx, tx)
	}); err != nil {
		t.Fatalf("first request: %v", err)
	}
	if during != 1 {
		t.Errorf("keys in flight while the handler ran = %v, want 1", during)
	}

	// Replay.
	if res, err := e.store.Do(ctx, params("charge", "k1", "fp1"), charge("k1")); err != nil || !res.Replayed {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	// Key reused with another request.
	if _, err := e.store.Do(ctx, params("charge", "k1", "fp2"), charge("k1")); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("reused key: got %v, want ErrFingerprintMismatch", err)
	}
	// In progress: a duplicate arrives while the first handler holds the key.
	if _, err := e.store.Do(ctx, params("charge", "k2", "fp1"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		_, err := e.store.Do(ctx, params("charge", "k2", "fp1"), charge("k2"))
		if !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("duplicate during the first: got %v, want ErrInProgress", err)
		}
		return charge("k2")(ctx, tx)
	}); err != nil {
		t.Fatalf("request holding k2: %v", err)
	}
	// A handler error releases the key.
	boom := errors.New("card declined")
	if _, err := e.store.Do(ctx, params("charge", "k3", "fp1"), func(context.Context, pgx.Tx) (*idem.Outcome, error) {
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing handler: got %v, want its error", err)
	}
	// A handler that answers after its own statement failed: handler_failed, not store_error.
	if _, err := e.store.Do(ctx, params("charge", "k4", "fp1"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
			t.Error("SELECT 1/0 succeeded, want a division by zero")
		}
		return &idem.Outcome{Status: 400}, nil
	}); !errors.Is(err, idem.ErrHandlerAborted) {
		t.Fatalf("handler answering with an aborted transaction: got %v, want ErrHandlerAborted", err)
	}

	e.expect(map[string]float64{
		ev(idem.EventAcquired):        4, // k1, k2, k3, k4
		ev(idem.EventHandlerFailed):   1, // k4
		ev(idem.EventStoreError):      0,
		dur + "handler_failed} count": 1,
		ev(idem.EventCompleted):       2, // k1, k2
		ev(idem.EventReplayed):        1,
		ev(idem.EventKeyReused):       1,
		ev(idem.EventInProgress):      1,
		ev(idem.EventReleased):        1, // k3
		dur + "completed} count":      2,
		dur + "released} count":       1,
	})
	if v := e.inFlight("charge"); v != 0 {
		t.Errorf("keys in flight after every request ended = %v, want 0", v)
	}
}

// TestTakeoverLeaseLostPurgeStoreError covers the outcomes that need the key table to be
// handled from outside: an abandoned claim whose lease ran out, a completion fenced off by a
// takeover, a purge, and a store that cannot be reached.
func TestTakeoverLeaseLostPurgeStoreError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	expireLease := func(key string) {
		t.Helper()
		tag, err := e.sch.Pool.Exec(ctx, `UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 second' WHERE key = $1`, key)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("expire the lease of %s: %v (%d rows)", key, err, tag.RowsAffected())
		}
	}

	// A claim made by another process (a store without the collector) that died: the lease runs
	// out and this process takes the key over.
	if _, err := e.sch.Pool.Exec(ctx, `INSERT INTO idempotency_keys
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, expires_at)
		VALUES ('', 'test', 'dead', 'charge', 'fp', 'in_flight', gen_random_uuid(), now() + interval '1 minute', 1, now() + interval '1 day')`); err != nil {
		t.Fatalf("the dead process's claim: %v", err)
	}
	expireLease("dead")
	if _, err := e.store.Do(ctx, params("charge", "dead", "fp"), charge("dead")); err != nil {
		t.Fatalf("takeover: %v", err)
	}

	// Lease lost: while the handler runs, another process takes the key over (its token
	// replaces ours), so the completion is fenced off and the work rolled back.
	_, err := e.store.Do(ctx, params("charge", "fenced", "fp"), func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := e.sch.Pool.Exec(ctx, `UPDATE idempotency_keys SET owner_token = gen_random_uuid(), attempt = attempt + 1 WHERE key = 'fenced'`); err != nil {
			t.Errorf("take the key over from outside: %v", err)
		}
		return charge("fenced")(ctx, tx)
	})
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("fenced completion: got %v, want ErrLeaseLost", err)
	}

	// Purge: two expired rows.
	if _, err := e.sch.Pool.Exec(ctx, `UPDATE idempotency_keys SET expires_at = now() - interval '1 hour', lease_expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if res, err := e.store.Purge(ctx, nil); err != nil || res.Deleted != 2 {
		t.Fatalf("purge: %+v, %v (want 2 rows deleted)", res, err)
	}

	// Store error: a store on a pool that is closed.
	cfg, err := pgxpool.ParseConfig(e.sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	down, err := idem.NewStore(closed, &idem.Config{Schema: e.sch.Name, Observer: e.col.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Do(ctx, params("charge", "down", "fp"), charge("down")); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("closed pool: got %v, want ErrStoreUnavailable", err)
	}

	e.expect(map[string]float64{
		ev(idem.EventTakenOver):                         1,
		ev(idem.EventCompleted):                         1,
		ev(idem.EventAcquired):                          1, // fenced
		ev(idem.EventLeaseLost):                         1,
		ev(idem.EventStoreError):                        1,
		evt + string(idem.EventPurged) + ",operation=}": 1,
		PurgedKeysTotal + "{}":                          2,
		dur + "completed} count":                        1,
	})
	if v := e.inFlight("charge"); v != 0 {
		t.Errorf("keys in flight after takeover, lease lost and a store error = %v, want 0", v)
	}
}

// TestInFlightEndsOnEveryPath holds keys through each way a handler can end (commit, error,
// panic, cancelled context, lease lost, transaction mode) and, for each, checks the gauge at 1
// inside the handler and back at 0 after it, never below.
func TestInFlightEndsOnEveryPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	paths := []struct {
		name string
		tx   bool
		fn   func(ctx context.Context, tx pgx.Tx, cancel context.CancelFunc) (*idem.Outcome, error)
	}{
		{"completed", false, func(ctx context.Context, tx pgx.Tx, _ context.CancelFunc) (*idem.Outcome, error) {
			return &idem.Outcome{Status: 200}, nil
		}},
		{"handler error", false, func(context.Context, pgx.Tx, context.CancelFunc) (*idem.Outcome, error) {
			return nil, errors.New("declined")
		}},
		{"panic", false, func(context.Context, pgx.Tx, context.CancelFunc) (*idem.Outcome, error) {
			panic("handler bug")
		}},
		{"cancelled", false, func(ctx context.Context, _ pgx.Tx, cancel context.CancelFunc) (*idem.Outcome, error) {
			cancel()
			<-ctx.Done()
			return &idem.Outcome{Status: 200}, nil
		}},
		{"lease lost", false, func(ctx context.Context, tx pgx.Tx, _ context.CancelFunc) (*idem.Outcome, error) {
			_, err := e.sch.Pool.Exec(ctx, `UPDATE idempotency_keys SET owner_token = gen_random_uuid() WHERE key = 'lease lost'`)
			return &idem.Outcome{Status: 200}, err
		}},
		{"transaction mode completed", true, func(context.Context, pgx.Tx, context.CancelFunc) (*idem.Outcome, error) {
			return &idem.Outcome{Status: 200}, nil
		}},
		{"transaction mode error", true, func(context.Context, pgx.Tx, context.CancelFunc) (*idem.Outcome, error) {
			return nil, errors.New("declined")
		}},
	}
	for _, p := range paths {
		ctx, cancel := context.WithCancel(context.Background())
		var during float64
		func() {
			defer func() { _ = recover() }()
			dp := params("charge", p.name, "fp")
			if p.tx {
				dp.Claim = idem.ClaimTransaction
			}
			_, _ = e.store.Do(ctx, dp, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				during = e.inFlight("charge")
				return p.fn(ctx, tx, cancel)
			})
		}()
		cancel()
		if during != 1 {
			t.Errorf("%s: keys in flight inside the handler = %v, want 1", p.name, during)
		}
		if after := e.inFlight("charge"); after != 0 {
			t.Errorf("%s: keys in flight after the handler = %v, want 0", p.name, after)
		}
	}
}

// TestInFlightNeverNegativeNorStuck feeds the Collector events the runtime can produce out of
// the usual pairs: an end it never saw begin, an end reported twice, a begin whose end is never
// reported (a failed release). The gauge stays at what it knows, and forgets a hold after
// StaleHold.
func TestInFlightNeverNegativeNorStuck(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	var mu sync.Mutex
	c := New(&Options{StaleHold: time.Minute})
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	obs := c.Observer()
	ctx := context.Background()
	gauge := func() float64 { return testutil.ToFloat64(c.inFlight.WithLabelValues("op")) }
	ev := func(k idem.EventKind, key string) { obs(ctx, idem.Event{Kind: k, Operation: "op", KeyHash: key}) }

	ev(idem.EventReleased, "a") // ended in this process, begun in another one's Collector
	ev(idem.EventLeaseLost, "a")
	if g := gauge(); g != 0 {
		t.Fatalf("ends without a begin moved the gauge to %v, want 0", g)
	}
	ev(idem.EventAcquired, "b")
	ev(idem.EventCompleted, "b")
	ev(idem.EventCompleted, "b") // reported twice
	if g := gauge(); g != 0 {
		t.Fatalf("an end reported twice left the gauge at %v, want 0", g)
	}

	// The original holder of c and its successor after a takeover, in one process.
	ev(idem.EventAcquired, "c")
	advance(time.Second)
	ev(idem.EventTakenOver, "c")
	if g := gauge(); g != 2 {
		t.Fatalf("two holds of one key: gauge %v, want 2", g)
	}
	ev(idem.EventLeaseLost, "c")
	ev(idem.EventCompleted, "c")
	if g := gauge(); g != 0 {
		t.Fatalf("both holds of c ended: gauge %v, want 0", g)
	}

	// A hold whose end the runtime never reports; and one that begins later and is still fresh.
	ev(idem.EventAcquired, "lost")
	advance(50 * time.Second)
	ev(idem.EventAcquired, "fresh")
	advance(11 * time.Second)
	if g := gauge(); g != 2 {
		t.Fatalf("before anything went stale: gauge %v, want 2", g)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if _, err := reg.Gather(); err != nil { // a scrape sweeps
		t.Fatal(err)
	}
	if g := gauge(); g != 1 {
		t.Fatalf("after StaleHold: gauge %v, want 1 (only the fresh hold)", g)
	}
	ev(idem.EventReleased, "lost") // its end, after all: already forgotten, so nothing moves
	if g := gauge(); g != 1 {
		t.Fatalf("a late end of a forgotten hold moved the gauge to %v, want 1", g)
	}
	ev(idem.EventReleased, "fresh")
	if g := gauge(); g != 0 {
		t.Fatalf("every hold ended: gauge %v, want 0", g)
	}
}

// TestOperationsStartAtZero: with Options.Operations, every series of an operation exists
// before its first event, so that alerts on increase() see the first one.
func TestOperationsStartAtZero(t *testing.T) {
	t.Parallel()
	c := New(&Options{Operations: []string{"charge"}})
	n := testutil.CollectAndCount(c, EventsTotal)
	// every kind for charge but purged, plus purged and the listener's two without an operation
	if want := len(kinds) + 2; n != want {
		t.Errorf("%s series before any event = %d, want %d", EventsTotal, n, want)
	}
	if n := testutil.CollectAndCount(c, KeysInFlight); n != 1 {
		t.Errorf("%s series before any event = %d, want 1", KeysInFlight, n)
	}
	if n := testutil.CollectAndCount(c, HandlerDuration); n != 2 {
		t.Errorf("%s series before any event = %d, want 2 (completed, released)", HandlerDuration, n)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(`
# HELP idemgen_idempotency_keys_in_flight Idempotency keys this process holds while their handler runs.
# TYPE idemgen_idempotency_keys_in_flight gauge
idemgen_idempotency_keys_in_flight{operation="charge"} 0
`), KeysInFlight); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("metric naming problems: %v %v", problems, err)
	}
}

// TestChain keeps an observer the program already had.
func TestChain(t *testing.T) {
	t.Parallel()
	c := New(nil)
	var seen []idem.EventKind
	mine := func(_ context.Context, e idem.Event) { seen = append(seen, e.Kind) }
	obs := Chain(nil, c.Observer(), mine)
	obs(context.Background(), idem.Event{Kind: idem.EventReplayed, Operation: "op"})
	if len(seen) != 1 || seen[0] != idem.EventReplayed {
		t.Errorf("the chained observer saw %v, want [replayed]", seen)
	}
	if v := testutil.ToFloat64(c.events.WithLabelValues("op", string(idem.EventReplayed))); v != 1 {
		t.Errorf("the collector counted %v replays, want 1", v)
	}
}

// TestListedOperationsCountAsOthers: an operation of Options.Operations, whose series New looks
// up once, ends with the same metrics as one that is not listed, for the same events: every
// kind (the listed one's zero series aside), the durations and the in-flight gauge.
func TestListedOperationsCountAsOthers(t *testing.T) {
	t.Parallel()
	listed, other := New(&Options{Operations: []string{"charge"}}), New(nil)
	allKinds := append(append([]idem.EventKind{}, kinds...), idem.EventHandlerTimeout, idem.EventListenerDeaf, idem.EventListenerHeard)
	for _, c := range []*Collector{listed, other} {
		obs := c.Observer()
		for i, k := range allKinds {
			obs(context.Background(), idem.Event{Kind: k, Operation: "charge", KeyHash: fmt.Sprint("k", i%3), Duration: time.Duration(i+1) * time.Millisecond, Count: i})
		}
		obs(context.Background(), idem.Event{Kind: idem.EventAcquired, Operation: "charge", KeyHash: "held"})
	}
	var want strings.Builder
	for _, name := range []string{EventsTotal, PurgedKeysTotal, HandlerDuration, KeysInFlight} {
		n, err := testutil.GatherAndCount(registryOf(t, other), name)
		if err != nil || n == 0 {
			t.Fatalf("no %s series for the operation that is not listed: %d, %v", name, n, err)
		}
	}
	// Every series of the unlisted collector, with its value, is in the listed one's.
	got, err := registryOf(t, listed).Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range got {
		for _, m := range mf.GetMetric() {
			have[seriesText(mf.GetName(), m)] = true
		}
	}
	ref, err := registryOf(t, other).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range ref {
		for _, m := range mf.GetMetric() {
			if text := seriesText(mf.GetName(), m); !have[text] {
				fmt.Fprintln(&want, text)
			}
		}
	}
	if want.Len() > 0 {
		t.Errorf("series of the unlisted operation missing or different for the listed one:\n%s", want.String())
	}
	if v := testutil.ToFloat64(listed.inFlight.WithLabelValues("charge")); v != 1 {
		t.Errorf("listed operation in flight = %v, want 1", v)
	}
}

// seriesText is a series' name, labels and value, without the time it was created.
func seriesText(name string, m *dto.Metric) string {
	return name + " " + createdTimestamp.ReplaceAllString(m.String(), "")
}

var createdTimestamp = regexp.MustCompile(`created_timestamp:\{[^}]*\}`)

func registryOf(t *testing.T, c *Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return reg
}
