package main

// BenchmarkHTTP: the example's create served over real HTTP on real PostgreSQL, with and without
// idempotency, side by side. `make bench-http` runs it (see docs/performance.md); `make test`
// never does, since go test runs benchmarks only when asked to.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The benchmark's knobs, from the environment (make bench-http passes its variables on).
const (
	envJSON           = "BENCH_HTTP_JSON"            // where the JSON goes; default bench-http.json here
	envProfile        = "BENCH_HTTP_PROFILE"         // a directory: write lease-mode CPU and alloc profiles there
	envProfileSeconds = "BENCH_HTTP_PROFILE_SECONDS" // how long the profiled load runs; default 10
	envRounds         = "BENCH_HTTP_ROUNDS"          // rounds; default 5
	envSegment        = "BENCH_HTTP_SEGMENT"         // each row's time in a round; default 2s
	envClients        = "BENCH_HTTP_CLIENTS"         // concurrent HTTP clients, also the storm size; default 16
	envConns          = "BENCH_HTTP_CONNS"           // each server's pool size; default 16
	envGenerator      = "BENCH_HTTP_GENERATOR"       // BenchmarkGenerate's metrics, from scripts/bench-http.sh
)

const (
	benchTenant = "bench"
	benchBody   = `{"amount_minor": 19900, "currency": "RUB"}`
	// replayKeys completed keys per server are replayed, round robin.
	replayKeys = 64
	// maxPerSegment bounds one segment's requests whatever the clock says.
	maxPerSegment = 200_000
)

type rowKind int

const (
	kindFirst  rowKind = iota // every request a new key
	kindReplay                // completed keys again
	kindStorm                 // all clients at once with one new key, key after key
)

// rowSpec is one line of the table and its targets (zero: none).
type rowSpec struct {
	id, label string
	server    string
	kind      rowKind
	// minRatio is the target for req/s as a multiple of the ceiling's.
	minRatio float64
	// maxTrips is the target for round trips per request; tripsOverCeiling adds the ceiling's.
	maxTrips         float64
	tripsOverCeiling bool
}

var rowSpecs = []rowSpec{
	{id: "ceiling", label: "create, idempotency off (ceiling)", server: serverCeiling, kind: kindFirst},
	{id: "lease", label: "create, claim: lease, first executions", server: serverLease, kind: kindFirst,
		minRatio: 0.70, maxTrips: 1, tripsOverCeiling: true},
	{id: "transaction", label: "create, claim: transaction, first executions", server: serverTransaction, kind: kindFirst,
		minRatio: 0.85},
	{id: "lease-replay", label: "replays, claim: lease", server: serverLease, kind: kindReplay, minRatio: 2.0, maxTrips: 1},
	{id: "transaction-replay", label: "replays, claim: transaction", server: serverTransaction, kind: kindReplay, minRatio: 2.0, maxTrips: 1},
	{id: "lease-storm", label: "duplicate storms, claim: lease", server: serverLease, kind: kindStorm},
	{id: "transaction-storm", label: "duplicate storms, claim: transaction", server: serverTransaction, kind: kindStorm},
}

// segment is one row's share of one round.
type segment struct {
	Requests int           `json:"requests"`
	Elapsed  time.Duration `json:"-"`
	ReqPerS  float64       `json:"req_per_s"`
	P50MS    float64       `json:"p50_ms"`
	P99MS    float64       `json:"p99_ms"`
	Trips    float64       `json:"round_trips_per_request"`
	CPUUS    float64       `json:"server_cpu_us_per_request"`
	Ratio    float64       `json:"ratio_to_ceiling"`
	Storms   int           `json:"storms,omitempty"`
}

type rowResult struct {
	ID        string     `json:"id"`
	Label     string     `json:"label"`
	Server    string     `json:"server"`
	ReqPerS   float64    `json:"req_per_s"`
	Ratio     float64    `json:"ratio_to_ceiling"`
	P50MS     float64    `json:"p50_ms"`
	P99MS     float64    `json:"p99_ms"`
	Trips     float64    `json:"round_trips_per_request"`
	CPUUS     float64    `json:"server_cpu_us_per_request"`
	Requests  int        `json:"requests"`
	Target    string     `json:"target,omitempty"`
	Met       *bool      `json:"target_met,omitempty"`
	TripsGoal string     `json:"round_trips_target,omitempty"`
	TripsMet  *bool      `json:"round_trips_target_met,omitempty"`
	Once      string     `json:"exactly_once,omitempty"`
	Rounds    []*segment `json:"rounds"`
}

type generatorResult struct {
	Spec       string  `json:"spec"`
	IdemgenMS  float64 `json:"idemgen_ms"`
	OapiMS     float64 `json:"oapi_codegen_ms"`
	Ratio      float64 `json:"ratio"`
	Target     string  `json:"target"`
	Met        bool    `json:"target_met"`
	Iterations int     `json:"iterations"`
}

type report struct {
	When     string            `json:"when"`
	Go       string            `json:"go"`
	CPUs     int               `json:"cpus"`
	Postgres map[string]string `json:"postgres"`
	Settings map[string]any    `json:"settings"`
	Rows     []*rowResult      `json:"rows"`
	Gen      *generatorResult  `json:"generator"`
	Profiles map[string]string `json:"profiles,omitempty"`
}

type benchConfig struct {
	rounds, clients, conns int
	segment                time.Duration
}

func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a whole number of at least 1", name, v)
	}
	return n
}

// BenchmarkHTTP serves the example's create through three servers, each in a child process on a
// loopback port with a schema of its own (bench_servers_test.go), and loads them with real HTTP
// clients from this process: first executions on the ceiling (no idempotency), in claim: lease
// and in claim: transaction; replays; and storms of concurrent duplicates, after each of which
// every key must have exactly one payment and one ledger event.
//
// It runs rounds of one short segment per row, the rows in a rotated order each round, so machine
// noise hits every row alike, and reports each number as the median of its rounds (a ratio to
// the ceiling is the median of the rounds' own ratios). It prints one table and writes it as JSON.
// Run it once: make bench-http.
func BenchmarkHTTP(b *testing.B) {
	if b.N != 1 {
		b.Fatalf("BenchmarkHTTP is one run of its own rounds, not a loop: run it with -benchtime=1x (make bench-http)")
	}
	cfg := benchConfig{
		rounds:  envInt(b, envRounds, 5),
		clients: envInt(b, envClients, 16),
		conns:   envInt(b, envConns, 16),
		segment: 2 * time.Second,
	}
	if v := os.Getenv(envSegment); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 100*time.Millisecond {
			b.Fatalf("%s=%q: want a duration of at least 100ms, such as 2s", envSegment, v)
		}
		cfg.segment = d
	}
	jsonPath := os.Getenv(envJSON)
	if jsonPath == "" {
		jsonPath = "bench-http.json"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// One schema and one child per server.
	schemas := map[string]*idemtest.Schema{}
	servers := map[string]*benchServer{}
	for _, mode := range []string{serverCeiling, serverLease, serverTransaction} {
		sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 4})
		if err := migrate(ctx, sch.Pool); err != nil {
			b.Fatal(err)
		}
		schemas[mode] = sch
		servers[mode] = startServer(b, mode, sch.URL, sch.Name, cfg.conns)
	}
	rep := &report{
		When:     time.Now().UTC().Format(time.RFC3339),
		Go:       runtime.Version(),
		CPUs:     runtime.NumCPU(),
		Postgres: pgSettings(b, schemas[serverCeiling].Pool),
		Settings: map[string]any{
			"rounds": cfg.rounds, "segment_seconds": cfg.segment.Seconds(), "clients": cfg.clients,
			"storm_size": cfg.clients, "pool_conns": cfg.conns, "loopback": true,
		},
	}
	l := newLoad(cfg.clients)
	defer l.client.CloseIdleConnections()

	// Warm-up, not measured: every pool connection prepares its statements, and the keys that
	// the replay rows replay are completed.
	for _, mode := range []string{serverCeiling, serverLease, serverTransaction} {
		s := servers[mode]
		if _, err := l.first(ctx, s, "warmup-"+mode, time.Second); err != nil {
			b.Fatalf("warm-up of the %s server: %v", mode, err)
		}
		if mode == serverCeiling {
			continue
		}
		for i := range replayKeys {
			st, replayed, _, err := l.send(ctx, s, fmt.Sprintf("replay-%d", i))
			if err != nil || st != http.StatusCreated || replayed {
				b.Fatalf("create replay key %d on the %s server: status %d, replayed %v, error %v; want 201, not replayed", i, mode, st, replayed, err)
			}
		}
	}

	results := make([]*rowResult, len(rowSpecs))
	for i, rs := range rowSpecs {
		results[i] = &rowResult{ID: rs.id, Label: rs.label, Server: rs.server}
	}
	for round := range cfg.rounds {
		ceiling := -1.0
		for k := range rowSpecs {
			// Rotate the order every round; the ceiling's own figure is filled in whenever it runs
			// and the ratios of the round are computed at the end of the round.
			i := (k + round) % len(rowSpecs)
			rs := rowSpecs[i]
			s := servers[rs.server]
			before, cpuBefore, err := s.stats(ctx, l.client)
			if err != nil {
				b.Fatal(err)
			}
			name := fmt.Sprintf("%s-r%d", rs.id, round)
			var seg *segment
			var stormKeys []string
			switch rs.kind {
			case kindFirst:
				seg, err = l.first(ctx, s, name, cfg.segment)
			case kindReplay:
				seg, err = l.replay(ctx, s, cfg.segment)
			case kindStorm:
				seg, stormKeys, err = l.storms(ctx, s, name, cfg.segment)
			}
			if err != nil {
				b.Fatalf("%s, round %d: %v", rs.label, round+1, err)
			}
			after, cpuAfter, err := s.stats(ctx, l.client)
			if err != nil {
				b.Fatal(err)
			}
			seg.Trips = float64(after-before) / float64(seg.Requests)
			seg.CPUUS = float64((cpuAfter - cpuBefore).Microseconds()) / float64(seg.Requests)
			if rs.kind == kindStorm {
				if err := checkOnce(ctx, schemas[rs.server].Pool, stormKeys); err != nil {
					b.Fatalf("EXACTLY-ONCE BROKEN: %s, round %d: %v", rs.label, round+1, err)
				}
			}
			if rs.server == serverCeiling && rs.kind == kindFirst {
				ceiling = seg.ReqPerS
			}
			results[i].Rounds = append(results[i].Rounds, seg)
		}
		for _, r := range results {
			seg := r.Rounds[len(r.Rounds)-1]
			seg.Ratio = seg.ReqPerS / ceiling
		}
	}
	for mode, sch := range schemas {
		if err := checkLedger(ctx, sch.Pool); err != nil {
			b.Fatalf("EXACTLY-ONCE BROKEN on the %s server: %v", mode, err)
		}
	}

	for _, r := range results {
		r.ReqPerS = medianOf(r.Rounds, func(s *segment) float64 { return s.ReqPerS })
		r.Ratio = medianOf(r.Rounds, func(s *segment) float64 { return s.Ratio })
		r.P50MS = medianOf(r.Rounds, func(s *segment) float64 { return s.P50MS })
		r.P99MS = medianOf(r.Rounds, func(s *segment) float64 { return s.P99MS })
		r.Trips = medianOf(r.Rounds, func(s *segment) float64 { return s.Trips })
		r.CPUUS = medianOf(r.Rounds, func(s *segment) float64 { return s.CPUUS })
		for _, s := range r.Rounds {
			r.Requests += s.Requests
		}
	}
	ceilingTrips := results[0].Trips
	for i, rs := range rowSpecs {
		r := results[i]
		if rs.minRatio > 0 {
			r.Target = fmt.Sprintf("≥ %.2f×", rs.minRatio)
			r.Met = ptr(r.Ratio >= rs.minRatio)
		}
		if rs.maxTrips > 0 {
			limit := rs.maxTrips
			r.TripsGoal = fmt.Sprintf("≤ %g", limit)
			if rs.tripsOverCeiling {
				limit += ceilingTrips
				r.TripsGoal = fmt.Sprintf("≤ ceiling+%g = %g", rs.maxTrips, limit)
			}
			// Round trips are counted, not timed: a fraction over the limit is a real extra trip
			// on some requests (a retried claim, say), so the comparison is exact.
			r.TripsMet = ptr(r.Trips <= limit+1e-9)
		}
		if rs.kind == kindStorm {
			keys := 0
			for _, s := range r.Rounds {
				keys += s.Storms
			}
			r.Once = fmt.Sprintf("yes: %d keys, 1 payment + 1 event each", keys)
		}
	}
	rep.Rows = results
	rep.Gen = generatorFromEnv(b)

	if dir := os.Getenv(envProfile); dir != "" {
		rep.Profiles = profileLease(ctx, b, l, servers[serverLease], dir, envInt(b, envProfileSeconds, 10))
	}

	printTable(os.Stdout, rep)
	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(jsonPath, append(out, '\n'), 0o644); err != nil {
		b.Fatalf("write the JSON report: %v", err)
	}
	abs, _ := filepath.Abs(jsonPath)
	fmt.Printf("\nwritten to %s\n", abs)

	b.ReportMetric(results[0].ReqPerS, "ceiling-req/s")
	b.ReportMetric(results[1].Ratio, "lease-x-ceiling")
	b.ReportMetric(results[2].Ratio, "transaction-x-ceiling")
	b.ReportMetric(results[3].Ratio, "replay-x-ceiling")
}

func ptr[T any](v T) *T { return &v }

func medianOf(segs []*segment, f func(*segment) float64) float64 {
	v := make([]float64, len(segs))
	for i, s := range segs {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func pgSettings(tb testing.TB, pool *pgxpool.Pool) map[string]string {
	tb.Helper()
	out := map[string]string{}
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "max_connections"} {
		var v string
		if err := pool.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
			tb.Fatalf("read PostgreSQL's %s: %v", name, err)
		}
		out[name] = v
	}
	return out
}

// load is the load generator: clients concurrent HTTP clients over loopback keep-alive
// connections, each request bounded by the client's timeout.
type load struct {
	clients int
	client  *http.Client
}

func newLoad(clients int) *load {
	return &load{clients: clients, client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        4 * clients,
			MaxIdleConnsPerHost: 2 * clients,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}}
}

var benchBodyBytes = []byte(benchBody)

// send creates a payment with key on s: the status, whether it was a replay, the latency.
func (l *load) send(ctx context.Context, s *benchServer, key string) (int, bool, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/payments", bytes.NewReader(benchBodyBytes))
	if err != nil {
		return 0, false, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(tenantHeader, benchTenant)
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		return 0, false, 0, fmt.Errorf("POST %s/v1/payments (key %s): %w", s.url, key, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return 0, false, 0, fmt.Errorf("POST %s/v1/payments (key %s): read the body: %w", s.url, key, err)
	}
	return resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed) == "true", d, nil
}

// run runs each client's loop until d has passed, maxPerSegment requests were sent or one
// failed; do sends request i of client c and returns its latency.
func (l *load) run(ctx context.Context, d time.Duration, do func(c, i int) (time.Duration, error)) (*segment, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		lats  []time.Duration
		count atomic.Int64
		wg    sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for c := range l.clients {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 4096)
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil && count.Add(1) <= maxPerSegment; i++ {
				lat, err := do(c, i)
				if err != nil {
					cancel(err)
					break
				}
				mine = append(mine, lat)
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return summarize(lats, elapsed), nil
}

func summarize(lats []time.Duration, elapsed time.Duration) *segment {
	slices.Sort(lats)
	seg := &segment{Requests: len(lats), Elapsed: elapsed, ReqPerS: float64(len(lats)) / elapsed.Seconds()}
	if len(lats) > 0 {
		at := func(q float64) float64 {
			i := int(math.Ceil(q*float64(len(lats)))) - 1
			return lats[max(i, 0)].Seconds() * 1000
		}
		seg.P50MS, seg.P99MS = at(0.50), at(0.99)
	}
	return seg
}

// first sends first executions: every request a key of its own, each answered 201, not a replay.
func (l *load) first(ctx context.Context, s *benchServer, name string, d time.Duration) (*segment, error) {
	return l.run(ctx, d, func(c, i int) (time.Duration, error) {
		key := fmt.Sprintf("%s-c%d-%d", name, c, i)
		st, replayed, lat, err := l.send(ctx, s, key)
		if err == nil && (st != http.StatusCreated || replayed) {
			err = fmt.Errorf("key %s: status %d, replayed %v; want 201, not a replay", key, st, replayed)
		}
		return lat, err
	})
}

// replay sends completed keys again, round robin: each answered 201, a replay.
func (l *load) replay(ctx context.Context, s *benchServer, d time.Duration) (*segment, error) {
	return l.run(ctx, d, func(c, i int) (time.Duration, error) {
		key := fmt.Sprintf("replay-%d", (c*7+i)%replayKeys)
		st, replayed, lat, err := l.send(ctx, s, key)
		if err == nil && (st != http.StatusCreated || !replayed) {
			err = fmt.Errorf("key %s: status %d, replayed %v; want 201, a replay", key, st, replayed)
		}
		return lat, err
	})
}

// storms sends storm after storm until d has passed: all clients at once, the same new key.
// Exactly one request of a storm executes (201, not a replay); the others are answered 409
// in-progress or replay it. It returns the keys, whose effects the caller counts.
func (l *load) storms(ctx context.Context, s *benchServer, name string, d time.Duration) (*segment, []string, error) {
	var lats []time.Duration
	var keys []string
	start := time.Now()
	deadline := start.Add(d)
	for n := 0; time.Now().Before(deadline) && n*l.clients < maxPerSegment; n++ {
		key := fmt.Sprintf("%s-storm-%d", name, n)
		keys = append(keys, key)
		type answer struct {
			status   int
			replayed bool
			lat      time.Duration
			err      error
		}
		answers := make([]answer, l.clients)
		var wg sync.WaitGroup
		for c := range l.clients {
			wg.Go(func() {
				a := &answers[c]
				a.status, a.replayed, a.lat, a.err = l.send(ctx, s, key)
			})
		}
		wg.Wait()
		executed := 0
		for _, a := range answers {
			switch {
			case a.err != nil:
				return nil, nil, a.err
			case a.status == http.StatusCreated && !a.replayed:
				executed++
			case a.status == http.StatusCreated, a.status == http.StatusConflict:
			default:
				return nil, nil, fmt.Errorf("storm on key %s: a duplicate got status %d; want 201 (a replay) or 409 (in progress)", key, a.status)
			}
			lats = append(lats, a.lat)
		}
		if executed != 1 {
			return nil, nil, fmt.Errorf("EXACTLY-ONCE BROKEN: storm of %d on key %s: %d requests executed (201, not a replay); want exactly 1", l.clients, key, executed)
		}
	}
	seg := summarize(lats, time.Since(start))
	seg.Storms = len(keys)
	return seg, keys, nil
}

// checkOnce requires exactly one payment and one ledger event for every key.
func checkOnce(ctx context.Context, pool *pgxpool.Pool, keys []string) error {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = derivedID("pay_", benchTenant, k)
	}
	var payments int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM payments WHERE tenant_id = $1 AND payment_id = ANY($2)`,
		benchTenant, ids).Scan(&payments); err != nil {
		return fmt.Errorf("count the storms' payments: %w", err)
	}
	rows, err := pool.Query(ctx, `
		SELECT idempotency_key, count(*) FROM payment_events
		WHERE tenant_id = $1 AND idempotency_key = ANY($2) GROUP BY idempotency_key`, benchTenant, keys)
	if err != nil {
		return fmt.Errorf("count the storms' ledger events: %w", err)
	}
	events := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return err
		}
		events[k] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("count the storms' ledger events: %w", err)
	}
	var bad []string
	for _, k := range keys {
		if events[k] != 1 {
			bad = append(bad, fmt.Sprintf("%s: %d events", k, events[k]))
		}
	}
	if payments != len(keys) || len(bad) > 0 {
		nbad := len(bad)
		if nbad > 5 {
			bad = append(bad[:5], "…")
		}
		return fmt.Errorf("%d keys, %d payments, and %d keys without exactly one ledger event (%s); want one payment and one event per key",
			len(keys), payments, nbad, strings.Join(bad, ", "))
	}
	return nil
}

// checkLedger requires, over the whole run, one ledger event per payment and no key with two.
func checkLedger(ctx context.Context, pool *pgxpool.Pool) error {
	var payments, events, twice int
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM payments),
		       (SELECT count(*) FROM payment_events),
		       (SELECT count(*) FROM (SELECT 1 FROM payment_events GROUP BY tenant_id, idempotency_key HAVING count(*) > 1) d)`).
		Scan(&payments, &events, &twice)
	if err != nil {
		return fmt.Errorf("count payments and ledger events: %w", err)
	}
	if payments != events || twice != 0 {
		return fmt.Errorf("%d payments, %d ledger events, %d keys with more than one event; want as many events as payments and none twice", payments, events, twice)
	}
	return nil
}

// generatorFromEnv reads BenchmarkGenerate's metrics, which scripts/bench-http.sh runs first and
// passes on as "spec=…;idemgen-ms=…;oapi-codegen-ms=…;ratio=…;n=…".
func generatorFromEnv(tb testing.TB) *generatorResult {
	tb.Helper()
	v := os.Getenv(envGenerator)
	if v == "" {
		return nil
	}
	g := &generatorResult{Target: "≤ 1.15×"}
	for _, kv := range strings.Split(v, ";") {
		k, val, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "spec":
			g.Spec = val
		case "idemgen-ms":
			g.IdemgenMS, err = strconv.ParseFloat(val, 64)
		case "oapi-codegen-ms":
			g.OapiMS, err = strconv.ParseFloat(val, 64)
		case "ratio":
			g.Ratio, err = strconv.ParseFloat(val, 64)
		case "n":
			g.Iterations, err = strconv.Atoi(val)
		}
		if err != nil {
			tb.Fatalf("%s=%q: %s: %v", envGenerator, v, k, err)
		}
	}
	if g.Ratio == 0 {
		tb.Fatalf("%s=%q has no ratio", envGenerator, v)
	}
	g.Met = g.Ratio <= 1.15
	return g
}

// profileLease loads the lease server with first executions for secs seconds while it records a
// CPU profile and an allocation profile (a delta over the same seconds), and writes both to dir.
func profileLease(ctx context.Context, tb testing.TB, l *load, s *benchServer, dir string, secs int) map[string]string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("profile directory: %v", err)
	}
	files := map[string]string{
		"cpu":    filepath.Join(dir, "lease-cpu.pprof"),
		"allocs": filepath.Join(dir, "lease-allocs.pprof"),
	}
	urls := map[string]string{
		"cpu":    fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.ctl, secs),
		"allocs": fmt.Sprintf("%s/debug/pprof/allocs?seconds=%d", s.ctl, secs),
	}
	// The load starts first and outlasts the profiles by a second on each side.
	loadDone := make(chan error, 1)
	go func() {
		_, err := l.first(ctx, s, "profile", time.Duration(secs+2)*time.Second)
		loadDone <- err
	}()
	time.Sleep(time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, len(urls))
	profClient := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	for name, u := range urls {
		wg.Go(func() {
			resp, err := profClient.Get(u)
			if err != nil {
				errs <- fmt.Errorf("%s profile: %w", name, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
			}
			if err == nil {
				err = os.WriteFile(files[name], b, 0o644)
			}
			if err != nil {
				errs <- fmt.Errorf("%s profile: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	select {
	case err := <-loadDone:
		if err != nil {
			tb.Fatalf("the profiled lease-mode load: %v", err)
		}
	case <-time.After(time.Minute):
		tb.Fatal("the profiled lease-mode load did not end within a minute of its profiles")
	}
	return files
}

func yesNo(b *bool) string {
	switch {
	case b == nil:
		return ""
	case *b:
		return "yes"
	}
	return "NO"
}

// printTable writes the report as a Markdown table, columns padded for the terminal.
func printTable(w io.Writer, rep *report) {
	pg := rep.Postgres
	fmt.Fprintf(w, "\nHTTP benchmark: %s, %d CPUs; PostgreSQL %s (fsync=%s, synchronous_commit=%s, full_page_writes=%s)\n",
		rep.Go, rep.CPUs, pg["server_version"], pg["fsync"], pg["synchronous_commit"], pg["full_page_writes"])
	fmt.Fprintf(w, "%v clients over loopback, pool of %v per server, %v rounds of %vs per row, medians of rounds\n\n",
		rep.Settings["clients"], rep.Settings["pool_conns"], rep.Settings["rounds"], rep.Settings["segment_seconds"])
	table := [][]string{{"row", "req/s", "× ceiling", "target", "met", "p50 ms", "p99 ms", "trips/req", "trips target", "met", "server CPU µs/req", "exactly once"}}
	for _, r := range rep.Rows {
		table = append(table, []string{
			r.Label, fmt.Sprintf("%.0f", r.ReqPerS), fmt.Sprintf("%.2f", r.Ratio), r.Target, yesNo(r.Met),
			fmt.Sprintf("%.2f", r.P50MS), fmt.Sprintf("%.2f", r.P99MS), fmt.Sprintf("%.2f", r.Trips),
			r.TripsGoal, yesNo(r.TripsMet), fmt.Sprintf("%.0f", r.CPUUS), r.Once,
		})
	}
	genRow := []string{"idemgen generate vs oapi-codegen alone", "not run (make bench-http runs it)", "", "≤ 1.15×", "", "", "", "", "", "", "", ""}
	if g := rep.Gen; g != nil {
		genRow[1], genRow[2], genRow[4] = fmt.Sprintf("%.0f / %.0f ms", g.IdemgenMS, g.OapiMS), fmt.Sprintf("%.2f", g.Ratio), yesNo(&g.Met)
	}
	table = append(table, genRow)
	widths := make([]int, len(table[0]))
	for _, row := range table {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(cells []string) {
		var sb strings.Builder
		sb.WriteString("|")
		for i, c := range cells {
			sb.WriteString(" " + c + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)) + " |")
		}
		fmt.Fprintln(w, sb.String())
	}
	line(table[0])
	sep := make([]string, len(widths))
	for i, n := range widths {
		sep[i] = strings.Repeat("-", n)
	}
	line(sep)
	for _, row := range table[1:] {
		line(row)
	}
	if g := rep.Gen; g != nil {
		fmt.Fprintf(w, "\ngenerator: %s, median of %d alternating iterations (BenchmarkGenerate)\n", g.Spec, g.Iterations)
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintf(w, "\nlease-mode server profiles: %s, %s\n  go tool pprof -top %s\n  go tool pprof -sample_index=alloc_space -top %s\n",
			rep.Profiles["cpu"], rep.Profiles["allocs"], rep.Profiles["cpu"], rep.Profiles["allocs"])
	}
}
