package bench

// BenchmarkHTTP: the example's create served over real HTTP on real PostgreSQL, with and without
// idempotency, side by side. `make bench-http` runs it (see docs/performance.md); `make test`
// never does, since go test runs benchmarks only when asked to.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// The benchmark's knobs, from the environment (make bench-http passes its variables on).
const (
	envJSON           = "BENCH_HTTP_JSON"            // where the JSON goes; default bench-http.json here
	envProfile        = "BENCH_HTTP_PROFILE"         // a directory: write the goProfiled servers' CPU and alloc profiles and the database profiles there
	envProfileSeconds = "BENCH_HTTP_PROFILE_SECONDS" // how long each profiled load runs; default 10
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
	// minPeerRatio is the target for req/s as a multiple of the hand-written peer's row of the
	// same kind (first executions, replays or storms).
	minPeerRatio float64
	// minHandwrittenRatio is the target for req/s as a multiple of the hand-written handler's
	// row of the same kind (serverHandwritten: net/http and pgx alone).
	minHandwrittenRatio float64
	// maxTrips is the target for round trips per request; tripsOverCeiling adds the ceiling's.
	maxTrips         float64
	tripsOverCeiling bool
}

var rowSpecs = []rowSpec{
	{id: "ceiling", label: "create, idempotency off (ceiling)", server: serverCeiling, kind: kindFirst},
	{id: "peer", label: "create, hand-written peer, first executions", server: serverPeer, kind: kindFirst},
	{id: "peer-row", label: "create, hand-written peer storing the runtime's key row, first executions", server: serverPeerRow, kind: kindFirst},
	{id: "peer-row-guarded", label: "create, hand-written peer storing the runtime's key row, with its guarantees, first executions", server: serverPeerRowGuarded, kind: kindFirst},
	{id: "peer-lease", label: "create, hand-written lease peer, first executions", server: serverPeerLease, kind: kindFirst},
	{id: "peer-lease-row", label: "create, hand-written lease peer storing the runtime's key row, first executions", server: serverPeerLeaseRow, kind: kindFirst},
	{id: "handwritten", label: "create, hand-written (advisory lock), first executions", server: serverHandwritten, kind: kindFirst},
	{id: "lease", label: "create, claim: lease, first executions", server: serverLease, kind: kindFirst,
		minRatio: 0.70, maxTrips: 1, tripsOverCeiling: true},
	{id: "transaction", label: "create, claim: transaction, first executions", server: serverTransaction, kind: kindFirst,
		minRatio: 0.85, minPeerRatio: 0.95, minHandwrittenRatio: 0.95},
	{id: "lease-history", label: "create, claim: lease, history: true, first executions", server: serverLeaseHistory, kind: kindFirst},
	{id: "transaction-history", label: "create, claim: transaction, history: true, first executions", server: serverTransactionHistory, kind: kindFirst},
	{id: "peer-replay", label: "replays, hand-written peer", server: serverPeer, kind: kindReplay},
	{id: "peer-row-replay", label: "replays, hand-written peer storing the runtime's key row", server: serverPeerRow, kind: kindReplay},
	{id: "peer-lease-replay", label: "replays, hand-written lease peer", server: serverPeerLease, kind: kindReplay},
	{id: "peer-lease-row-replay", label: "replays, hand-written lease peer storing the runtime's key row", server: serverPeerLeaseRow, kind: kindReplay},
	{id: "handwritten-replay", label: "replays, hand-written (advisory lock)", server: serverHandwritten, kind: kindReplay},
	{id: "lease-replay", label: "replays, claim: lease", server: serverLease, kind: kindReplay,
		minRatio: 2.0, minPeerRatio: 1.0, minHandwrittenRatio: 1.0, maxTrips: 1},
	{id: "transaction-replay", label: "replays, claim: transaction", server: serverTransaction, kind: kindReplay,
		minRatio: 2.0, minPeerRatio: 1.0, minHandwrittenRatio: 1.0, maxTrips: 1},
	{id: "lease-history-replay", label: "replays, claim: lease, history: true", server: serverLeaseHistory, kind: kindReplay},
	{id: "transaction-history-replay", label: "replays, claim: transaction, history: true", server: serverTransactionHistory, kind: kindReplay},
	{id: "cached-replay", label: "replays, replay cache on (claim: lease)", server: serverCached, kind: kindReplay, minRatio: 2.0},
	{id: "peer-storm", label: "duplicate storms, hand-written peer", server: serverPeer, kind: kindStorm},
	{id: "peer-lease-storm", label: "duplicate storms, hand-written lease peer", server: serverPeerLease, kind: kindStorm},
	{id: "handwritten-storm", label: "duplicate storms, hand-written (advisory lock)", server: serverHandwritten, kind: kindStorm},
	{id: "lease-storm", label: "duplicate storms, claim: lease", server: serverLease, kind: kindStorm},
	{id: "transaction-storm", label: "duplicate storms, claim: transaction", server: serverTransaction, kind: kindStorm},
}

// benchServers are the servers BenchmarkHTTP starts, in the order it warms them up.
var benchServers = []string{serverCeiling, serverPeer, serverPeerRow, serverPeerRowGuarded, serverPeerLease, serverPeerLeaseRow, serverHandwritten, serverLease, serverTransaction, serverCached, serverLeaseHistory, serverTransactionHistory}

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
	Peer     float64       `json:"ratio_to_peer"`
	// LeasePeer is the ratio to the hand-written lease peer's row of the same kind, for the
	// rows of servers in lease mode.
	LeasePeer float64 `json:"ratio_to_lease_peer,omitempty"`
	// Handwritten is the ratio to the hand-written handler's row of the same kind.
	Handwritten float64 `json:"ratio_to_handwritten"`
	Storms      int     `json:"storms,omitempty"`
}

type rowResult struct {
	ID              string     `json:"id"`
	Label           string     `json:"label"`
	Server          string     `json:"server"`
	ReqPerS         float64    `json:"req_per_s"`
	Ratio           float64    `json:"ratio_to_ceiling"`
	Peer            float64    `json:"ratio_to_peer"`
	LeasePeer       float64    `json:"ratio_to_lease_peer,omitempty"`
	Handwritten     float64    `json:"ratio_to_handwritten"`
	P50MS           float64    `json:"p50_ms"`
	P99MS           float64    `json:"p99_ms"`
	Trips           float64    `json:"round_trips_per_request"`
	CPUUS           float64    `json:"server_cpu_us_per_request"`
	Requests        int        `json:"requests"`
	Target          string     `json:"target,omitempty"`
	Met             *bool      `json:"target_met,omitempty"`
	PeerGoal        string     `json:"peer_target,omitempty"`
	PeerMet         *bool      `json:"peer_target_met,omitempty"`
	HandwrittenGoal string     `json:"handwritten_target,omitempty"`
	HandwrittenMet  *bool      `json:"handwritten_target_met,omitempty"`
	TripsGoal       string     `json:"round_trips_target,omitempty"`
	TripsMet        *bool      `json:"round_trips_target_met,omitempty"`
	Once            string     `json:"exactly_once,omitempty"`
	Rounds          []*segment `json:"rounds"`
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

// BenchmarkHTTP serves the example's create through the servers of benchServers, each in a child
// process on a loopback port with a schema of its own (servers_test.go), and loads them with real
// HTTP clients from this process: first executions on the ceiling (no idempotency), in claim:
// lease and in claim: transaction and on the hand-written peers; replays; and storms of
// concurrent duplicates, after each of which every key must have exactly one payment and one
// ledger event. With BENCH_HTTP_BASE_DIR set (scripts/bench-http.sh sets it from
// BENCH_HTTP_BASE), the claim: lease and claim: transaction servers of that older revision run
// too, in the same rounds, each row beside today's (base_test.go).
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
		rounds:  envInt(b, envRounds, 6),
		clients: envInt(b, envClients, 16),
		conns:   envInt(b, envConns, 16),
		segment: 1250 * time.Millisecond,
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// One schema and one child per server, and per server of the base revision (base_test.go).
	schemas := map[string]*idemtest.Schema{}
	servers := map[string]*benchServer{}
	for _, mode := range benchServers {
		sch := idemtest.TestSchema(b, &idemtest.SchemaOpts{MaxConns: 4})
		if err := payments.Migrate(ctx, sch.Pool); err != nil {
			b.Fatal(err)
		}
		schemas[mode] = sch
		servers[mode] = startServer(b, "", mode, sch.URL, sch.Name, cfg.conns)
	}
	started, rows := benchServers, rowSpecs
	base := baseFromEnv(b)
	if base != nil {
		for _, mode := range baseModes {
			key := baseServer(mode)
			schemas[key], servers[key] = base.start(ctx, b, mode, cfg.conns)
			started = append(slices.Clip(started), key)
		}
		rows = withBaseRows(rows, base.rev)
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
	if base != nil {
		rep.Settings["base_revision"] = base.rev
	}
	checkConnections(ctx, b, schemas[serverCeiling].Pool, len(started), cfg.conns)
	l := newLoad(cfg.clients)
	defer l.client.CloseIdleConnections()

	// Warm-up, not measured: every pool connection prepares its statements, and the keys that
	// the replay rows replay are completed.
	for _, mode := range started {
		s := servers[mode]
		if _, err := l.first(ctx, s, "warmup-"+mode, time.Second); err != nil {
			b.Fatalf("warm-up of the %s server: %v", s.mode, err)
		}
		if mode == serverCeiling {
			continue
		}
		for i := range replayKeys {
			st, replayed, _, err := l.send(ctx, s, fmt.Sprintf("replay-%d", i))
			if err != nil || st != http.StatusCreated || replayed {
				b.Fatalf("create replay key %d on the %s server: status %d, replayed %v, error %v; want 201, not replayed", i, s.mode, st, replayed, err)
			}
		}
	}

	results := make([]*rowResult, len(rows))
	for i, rs := range rows {
		results[i] = &rowResult{ID: rs.id, Label: rs.label, Server: rs.server}
	}
	for round := range cfg.rounds {
		ceiling := -1.0
		peer, leasePeer, handwritten := map[rowKind]float64{}, map[rowKind]float64{}, map[rowKind]float64{}
		for k := range rows {
			// Rotate the order every round; the ceiling's own figure is filled in whenever it runs
			// and the ratios of the round are computed at the end of the round.
			i := (k + round) % len(rows)
			rs := rows[i]
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
			switch rs.server {
			case serverPeer:
				peer[rs.kind] = seg.ReqPerS
			case serverPeerLease:
				leasePeer[rs.kind] = seg.ReqPerS
			case serverHandwritten:
				handwritten[rs.kind] = seg.ReqPerS
			}
			results[i].Rounds = append(results[i].Rounds, seg)
		}
		for i, r := range results {
			seg := r.Rounds[len(r.Rounds)-1]
			seg.Ratio = seg.ReqPerS / ceiling
			seg.Peer = seg.ReqPerS / peer[rows[i].kind]
			seg.Handwritten = seg.ReqPerS / handwritten[rows[i].kind]
			if inLeaseMode(rows[i].server) {
				seg.LeasePeer = seg.ReqPerS / leasePeer[rows[i].kind]
			}
		}
	}
	for mode, sch := range schemas {
		if err := checkLedger(ctx, sch.Pool); err != nil {
			b.Fatalf("EXACTLY-ONCE BROKEN on the %s server: %v", servers[mode].mode, err)
		}
	}
	// A base server's connections carry the application_name of today's server of the same mode,
	// by which the database profile finds a server's connections: the base servers stop here,
	// their rows done, and leave the profiles to today's servers.
	if base != nil {
		for _, mode := range baseModes {
			servers[baseServer(mode)].stop(b)
			delete(servers, baseServer(mode))
		}
	}

	for _, r := range results {
		r.ReqPerS = medianOf(r.Rounds, func(s *segment) float64 { return s.ReqPerS })
		r.Ratio = medianOf(r.Rounds, func(s *segment) float64 { return s.Ratio })
		r.Peer = medianOf(r.Rounds, func(s *segment) float64 { return s.Peer })
		r.LeasePeer = medianOf(r.Rounds, func(s *segment) float64 { return s.LeasePeer })
		r.Handwritten = medianOf(r.Rounds, func(s *segment) float64 { return s.Handwritten })
		r.P50MS = medianOf(r.Rounds, func(s *segment) float64 { return s.P50MS })
		r.P99MS = medianOf(r.Rounds, func(s *segment) float64 { return s.P99MS })
		r.Trips = medianOf(r.Rounds, func(s *segment) float64 { return s.Trips })
		r.CPUUS = medianOf(r.Rounds, func(s *segment) float64 { return s.CPUUS })
		for _, s := range r.Rounds {
			r.Requests += s.Requests
		}
	}
	ceilingTrips := results[0].Trips // rows[0] is the ceiling
	for i, rs := range rows {
		r := results[i]
		if rs.minRatio > 0 {
			r.Target = fmt.Sprintf("≥ %.2f×", rs.minRatio)
			r.Met = ptr(r.Ratio >= rs.minRatio)
		}
		if rs.minPeerRatio > 0 {
			r.PeerGoal = fmt.Sprintf("≥ %.2f× peer", rs.minPeerRatio)
			r.PeerMet = ptr(r.Peer >= rs.minPeerRatio)
		}
		if rs.minHandwrittenRatio > 0 {
			r.HandwrittenGoal = fmt.Sprintf("≥ %.2f× hand-written", rs.minHandwrittenRatio)
			r.HandwrittenMet = ptr(r.Handwritten >= rs.minHandwrittenRatio)
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

	var dbProfiles []*dbProfile
	if dir := os.Getenv(envProfile); dir != "" {
		secs := envInt(b, envProfileSeconds, 10)
		rep.Profiles = map[string]string{}
		for _, mode := range goProfiled {
			for k, f := range profileServer(ctx, b, l, servers[mode], mode, dir, secs) {
				rep.Profiles[k] = f
			}
		}
		dbProfiles = profileDatabase(ctx, b, l, servers, schemas, rep.Postgres, dir, secs, rep.Profiles)
	}

	printTable(os.Stdout, rep)
	if len(dbProfiles) > 0 {
		fmt.Println()
		writeDBSummaries(os.Stdout, dbProfiles)
	}
	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(jsonPath, append(out, '\n'), 0o644); err != nil {
		b.Fatalf("write the JSON report: %v", err)
	}
	abs, _ := filepath.Abs(jsonPath)
	fmt.Printf("\nwritten to %s\n", abs)

	byID := map[string]*rowResult{}
	for _, r := range results {
		byID[r.ID] = r
	}
	b.ReportMetric(byID["ceiling"].ReqPerS, "ceiling-req/s")
	b.ReportMetric(byID["peer"].Ratio, "peer-x-ceiling")
	b.ReportMetric(byID["lease"].Ratio, "lease-x-ceiling")
	b.ReportMetric(byID["transaction"].Ratio, "transaction-x-ceiling")
	b.ReportMetric(byID["transaction"].Peer, "transaction-x-peer")
	b.ReportMetric(byID["transaction"].Handwritten, "transaction-x-handwritten")
	b.ReportMetric(byID["lease-replay"].Ratio, "replay-x-ceiling")
}

func ptr[T any](v T) *T { return &v }

// checkConnections stops the benchmark at once, saying what it needs, when the server cannot
// give each of the n bench servers its pool: otherwise a server would find no connection in the
// middle of a row and answer 503. Each server keeps up to conns connections and one for its
// listener, and the benchmark keeps up to 4 per server's schema (idemtest.SchemaOpts above).
func checkConnections(ctx context.Context, b *testing.B, pool *pgxpool.Pool, n, conns int) {
	b.Helper()
	var max, reserved, used int
	if err := pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int, (SELECT count(*) FROM pg_stat_activity)`).Scan(&max, &reserved, &used); err != nil {
		b.Fatal(err)
	}
	need := n * (conns + 1 + 4)
	if free := max - reserved - used; need > free {
		b.Fatalf("BenchmarkHTTP needs %d connections (%d servers, each a pool of %s=%d, a listener and 4 for the benchmark), "+
			"and the server has %d free (max_connections %d, %d reserved, %d in use): raise max_connections "+
			"(make bench-http starts its own server with 400) or lower %s", need, n, envConns, conns,
			free, max, reserved, used, envConns)
	}
}

// inLeaseMode says whether server claims in lease mode (or is the hand-written lease peer):
// its rows are compared with the lease peer's too.
func inLeaseMode(server string) bool {
	return server == serverLease || server == serverCached || server == serverLeaseHistory || server == serverPeerLease || server == serverPeerLeaseRow ||
		server == baseServer(serverLease)
}

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

// paymentID is the id the example gives the payment created with key: "pay_" and the first 24
// hex digits of SHA-256(tenant NUL key). The check below counts payments by it, so it states the
// example's scheme on its own rather than borrowing the example's code.
func paymentID(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return "pay_" + hex.EncodeToString(sum[:])[:24]
}

// checkOnce requires exactly one payment and one ledger event for every key.
func checkOnce(ctx context.Context, pool *pgxpool.Pool, keys []string) error {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = paymentID(benchTenant, k)
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
	g := &generatorResult{Target: "≤ 1.00×"}
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
	g.Met = g.Ratio <= 1.0
	return g
}

// goProfiled are the servers whose Go profiles BENCH_HTTP_PROFILE records: both claim modes, the
// hand-written peers they are compared with, the guarded row peer, which does transaction mode's
// work by hand, and the hand-written handler, transaction mode's ceiling.
var goProfiled = []string{serverLease, serverTransaction, serverPeer, serverPeerLease, serverPeerRowGuarded, serverHandwritten}

// profileServer loads server s (mode) with first executions for secs seconds while it records a
// CPU profile and an allocation profile (a delta over the same seconds), and writes both to dir
// as <mode>-cpu.pprof and <mode>-allocs.pprof.
func profileServer(ctx context.Context, tb testing.TB, l *load, s *benchServer, mode, dir string, secs int) map[string]string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("profile directory: %v", err)
	}
	files := map[string]string{
		mode + "-cpu":    filepath.Join(dir, mode+"-cpu.pprof"),
		mode + "-allocs": filepath.Join(dir, mode+"-allocs.pprof"),
	}
	urls := map[string]string{
		mode + "-cpu":    fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.ctl, secs),
		mode + "-allocs": fmt.Sprintf("%s/debug/pprof/allocs?seconds=%d", s.ctl, secs),
	}
	// The load starts first and outlasts the profiles by a second on each side.
	type loaded struct {
		seg *segment
		err error
	}
	loadDone := make(chan loaded, 1)
	go func() {
		seg, err := l.first(ctx, s, "profile", time.Duration(secs+2)*time.Second)
		loadDone <- loaded{seg, err}
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
	case done := <-loadDone:
		if done.err != nil {
			tb.Fatalf("the profiled load of the %s server: %v", mode, done.err)
		}
		// A profile's samples divided by its seconds and this rate are CPU per request, the
		// figure to compare between servers' profiles.
		tb.Logf("profiled load of the %s server: %.0f requests a second", mode, done.seg.ReqPerS)
	case <-time.After(time.Minute):
		tb.Fatalf("the profiled load of the %s server did not end within a minute of its profiles", mode)
	}
	return files
}

// leasePeerCell is r's ratio to the lease peer, for rows in lease mode.
func leasePeerCell(r *rowResult) string {
	if !inLeaseMode(r.Server) {
		return ""
	}
	return fmt.Sprintf("%.2f", r.LeasePeer)
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
	fmt.Fprintf(w, "%v clients over loopback, pool of %v per server, %v rounds of %vs per row, medians of rounds; × peer, × lease peer, × hand-written: to the hand-written peer's (lease peer's, net/http handler's) row of the same kind\n",
		rep.Settings["clients"], rep.Settings["pool_conns"], rep.Settings["rounds"], rep.Settings["segment_seconds"])
	if rev, ok := rep.Settings["base_revision"]; ok {
		fmt.Fprintf(w, "rows ending in (%v): that git revision's server (BENCH_HTTP_BASE), on a schema it migrated itself, in the same rounds; its ratios are to today's ceiling and peers\n", rev)
	}
	fmt.Fprintln(w)
	table := [][]string{{"row", "req/s", "× ceiling", "target", "met", "× peer", "peer target", "met", "× lease peer", "× hand-written", "hand-written target", "met", "p50 ms", "p99 ms", "trips/req", "trips target", "met", "server CPU µs/req", "exactly once"}}
	for _, r := range rep.Rows {
		table = append(table, []string{
			r.Label, fmt.Sprintf("%.0f", r.ReqPerS), fmt.Sprintf("%.2f", r.Ratio), r.Target, yesNo(r.Met),
			fmt.Sprintf("%.2f", r.Peer), r.PeerGoal, yesNo(r.PeerMet), leasePeerCell(r),
			fmt.Sprintf("%.2f", r.Handwritten), r.HandwrittenGoal, yesNo(r.HandwrittenMet),
			fmt.Sprintf("%.2f", r.P50MS), fmt.Sprintf("%.2f", r.P99MS), fmt.Sprintf("%.2f", r.Trips),
			r.TripsGoal, yesNo(r.TripsMet), fmt.Sprintf("%.0f", r.CPUUS), r.Once,
		})
	}
	genRow := []string{"idemgen generate vs oapi-codegen alone", "not run (make bench-http runs it)", "", "≤ 1.00×", "", "", "", "", "", "", "", "", "", "", "", "", "", "", ""}
	if g := rep.Gen; g != nil {
		genRow[1], genRow[2], genRow[4] = fmt.Sprintf("%.0f / %.0f ms", g.IdemgenMS, g.OapiMS), fmt.Sprintf("%.2f", g.Ratio), yesNo(&g.Met)
	}
	table = append(table, genRow)
	writeAligned(w, table)
	if g := rep.Gen; g != nil {
		fmt.Fprintf(w, "\ngenerator: %s, median of %d alternating iterations (BenchmarkGenerate)\n", g.Spec, g.Iterations)
	}
	for _, mode := range goProfiled {
		cpu, allocs := rep.Profiles[mode+"-cpu"], rep.Profiles[mode+"-allocs"]
		if cpu == "" {
			continue
		}
		fmt.Fprintf(w, "\n%s server profiles (first executions): %s, %s\n  go tool pprof -top %s\n  go tool pprof -sample_index=alloc_space -top %s\n",
			mode, cpu, allocs, cpu, allocs)
	}
}

// The database profile. With BENCH_HTTP_PROFILE set, after the measured rounds and the lease
// server's Go profiles, each server in turn gets BENCH_HTTP_PROFILE_SECONDS of one row's load,
// with no other load on the database, and what PostgreSQL spent in those seconds is written to
// DIR/pgss-<server>-<row>.txt: per statement from pg_stat_statements (when the server has it),
// commits from pg_stat_database, WAL from pg_stat_wal, the tuples written to each of the schema's
// tables from pg_stat_user_tables, the CPU time of PostgreSQL's processes (when they run on this
// machine), and the states of the server's connections, sampled. Every figure is the difference
// of two snapshots of cumulative counters, not a reset: that needs no privilege and leaves the
// statistics of a shared server as they were.

// dbProfileRow is one row the database profile runs, on one server.
type dbProfileRow struct {
	server string
	kind   rowKind
}

var dbProfileRows = []dbProfileRow{
	{serverCeiling, kindFirst},
	{serverPeer, kindFirst},
	{serverPeerRow, kindFirst},
	{serverPeerRowGuarded, kindFirst},
	{serverPeerLease, kindFirst},
	{serverPeerLeaseRow, kindFirst},
	{serverHandwritten, kindFirst},
	{serverLease, kindFirst},
	{serverTransaction, kindFirst},
	{serverLeaseHistory, kindFirst},
	{serverTransactionHistory, kindFirst},
	{serverPeer, kindReplay},
	{serverPeerRow, kindReplay},
	{serverPeerLease, kindReplay},
	{serverPeerLeaseRow, kindReplay},
	{serverHandwritten, kindReplay},
	{serverLease, kindReplay},
	{serverTransaction, kindReplay},
	{serverLeaseHistory, kindReplay},
	{serverTransactionHistory, kindReplay},
}

func (r dbProfileRow) name() string {
	if r.kind == kindReplay {
		return r.server + "-replay"
	}
	return r.server + "-first"
}

func (r dbProfileRow) label() string {
	what := map[string]string{serverCeiling: "the ceiling (idempotency off)", serverPeer: "the hand-written peer", serverPeerRow: "the hand-written peer storing the runtime's key row", serverPeerRowGuarded: "the hand-written peer storing the runtime's key row, with its guarantees", serverPeerLease: "the hand-written lease peer", serverPeerLeaseRow: "the hand-written lease peer storing the runtime's key row",
		serverHandwritten: "the hand-written handler (net/http, advisory lock)",
		serverLease:       "claim: lease", serverTransaction: "claim: transaction",
		serverLeaseHistory: "claim: lease, history: true", serverTransactionHistory: "claim: transaction, history: true"}[r.server]
	if r.kind == kindReplay {
		return "replays, " + what
	}
	return "first executions, " + what
}

// benchAppName is the application_name of a bench server's connections, by which the profile
// finds them in pg_stat_activity.
func benchAppName(mode string) string { return "idemgen-bench-" + mode }

// profilerMark is a column alias in every query the profiler sends: pg_stat_statements keeps
// aliases in its normalised text, so the profile can leave its own statements out.
const profilerMark = "idemgen_profiler"

// Counters read from PostgreSQL's cumulative statistics.
type (
	pgssKey struct {
		user     uint32
		queryID  int64
		toplevel bool
	}
	pgssCounters struct {
		text                                  string
		plans, calls, rows                    int64
		planMS, execMS                        float64
		blksHit, blksRead, blksDirtied, blksW int64
		walRecords, walFPI                    int64
		walBytes                              float64
	}
	tupleCounters struct{ ins, upd, hot, del, vacuums, analyzes int64 }
	dbSnapshot    struct {
		commits, rollbacks                      int64
		walRecords, walFPI, walWrites, walSyncs int64
		walBytes                                float64
		checkpoints                             int64
		tables                                  map[[2]string]tupleCounters // by schema and table
		statements                              map[pgssKey]pgssCounters    // nil without pg_stat_statements
		own                                     int64                       // queries the profiler had sent before this snapshot
	}
)

// dbProfiler reads the statistics, over a connection of its own (and a second one for sampling).
type dbProfiler struct {
	conn, sampler *pgx.Conn
	// schemas are the schemas whose tables every snapshot reads.
	schemas []string
	// pgssView is the schema-qualified pg_stat_statements view, or "" when the server lacks it;
	// pgssNote then says why, and what to do.
	pgssView, pgssNote string
	// postmaster is the pid of PostgreSQL's postmaster when its processes are visible in this
	// machine's /proc, else 0 and procNote says why.
	postmaster int
	procNote   string
	// own counts the profiler's queries: each is a transaction of its own, whose commit
	// pg_stat_database counts among the load's unless subtracted.
	own atomic.Int64
	// flushers make every other connection that may have statistics pending flush them (see
	// flushStats), and return how many statements that took.
	flushers []func(context.Context) (int, error)
}

func newDBProfiler(ctx context.Context, url string, schemas []string) (*dbProfiler, error) {
	connect := func() (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("database profile: parse the server's URL: %w", err)
		}
		cfg.RuntimeParams["application_name"] = "idemgen-bench-profiler"
		// Every query one transaction, which the profile subtracts from the database's commits:
		// with prepared statements, a statement's first use would be two.
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("database profile: connect: %w", err)
		}
		return c, nil
	}
	p := &dbProfiler{schemas: schemas}
	var err error
	if p.conn, err = connect(); err != nil {
		return nil, err
	}
	if p.sampler, err = connect(); err != nil {
		p.close()
		return nil, err
	}
	// pg_settings, unlike current_setting, hides what this role may not read instead of failing.
	var schema, preload, db string
	err = p.queryRow(ctx, `SELECT coalesce((SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
			WHERE e.extname = 'pg_stat_statements'), ''),
		coalesce((SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'), '(not readable by this role)'),
		current_database() AS `+profilerMark).
		Scan(&schema, &preload, &db)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("database profile: look for pg_stat_statements: %w", err)
	}
	switch {
	case schema == "" && !strings.Contains(preload, "pg_stat_statements"):
		p.pgssNote = fmt.Sprintf("not available: the server does not load pg_stat_statements (shared_preload_libraries = %q). "+
			"make bench-http loads it when BENCH_HTTP_PROFILE is set (PG_STATEMENTS=1 scripts/with-pg.sh); on a server of your own, "+
			"add pg_stat_statements to shared_preload_libraries, restart it and run CREATE EXTENSION pg_stat_statements in database %s", preload, db)
	case schema == "":
		p.pgssNote = fmt.Sprintf("not available: the server loads pg_stat_statements but database %s has no such extension: "+
			"run CREATE EXTENSION pg_stat_statements in it", db)
	default:
		p.pgssView = pgx.Identifier{schema, "pg_stat_statements"}.Sanitize()
		// A first read tells whether this role may read it (and whether the server's version has
		// the columns the profile reads).
		if _, err := p.statements(ctx); err != nil {
			p.pgssNote = fmt.Sprintf("not available: reading %s failed: %v", p.pgssView, err)
			p.pgssView = ""
		}
	}
	p.postmaster, p.procNote = p.findPostmaster(ctx)
	return p, nil
}

func (p *dbProfiler) close() {
	for _, c := range []*pgx.Conn{p.conn, p.sampler} {
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Close(ctx)
			cancel()
		}
	}
}

func (p *dbProfiler) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	p.own.Add(1)
	return p.conn.QueryRow(ctx, sql, args...)
}

// statements reads pg_stat_statements for the current database, the profiler's own left out.
func (p *dbProfiler) statements(ctx context.Context) (map[pgssKey]pgssCounters, error) {
	p.own.Add(1)
	rows, err := p.conn.Query(ctx, `
		SELECT userid, coalesce(queryid, 0), toplevel, query, plans, total_plan_time, calls, total_exec_time, rows,
			shared_blks_hit, shared_blks_read, shared_blks_dirtied, shared_blks_written,
			wal_records, wal_fpi, wal_bytes::float8 AS `+profilerMark+`
		FROM `+p.pgssView+`
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND query NOT LIKE '%`+profilerMark+`%'`)
	if err != nil {
		return nil, err
	}
	out := map[pgssKey]pgssCounters{}
	for rows.Next() {
		var k pgssKey
		var c pgssCounters
		if err := rows.Scan(&k.user, &k.queryID, &k.toplevel, &c.text, &c.plans, &c.planMS, &c.calls, &c.execMS, &c.rows,
			&c.blksHit, &c.blksRead, &c.blksDirtied, &c.blksW, &c.walRecords, &c.walFPI, &c.walBytes); err != nil {
			rows.Close()
			return nil, err
		}
		out[k] = c
	}
	return out, rows.Err()
}

// snapshot reads every counter the profile compares.
func (p *dbProfiler) snapshot(ctx context.Context) (*dbSnapshot, error) {
	s := &dbSnapshot{own: p.own.Load(), tables: map[[2]string]tupleCounters{}}
	err := p.queryRow(ctx, `
		SELECT d.xact_commit, d.xact_rollback, w.wal_records, w.wal_fpi, w.wal_bytes::float8, w.wal_write, w.wal_sync,
			b.checkpoints_timed + b.checkpoints_req AS `+profilerMark+`
		FROM pg_stat_database d, pg_stat_wal w, pg_stat_bgwriter b WHERE d.datname = current_database()`).
		Scan(&s.commits, &s.rollbacks, &s.walRecords, &s.walFPI, &s.walBytes, &s.walWrites, &s.walSyncs, &s.checkpoints)
	if err != nil {
		return nil, fmt.Errorf("database profile: read pg_stat_database, pg_stat_wal and pg_stat_bgwriter: %w", err)
	}
	p.own.Add(1)
	rows, err := p.conn.Query(ctx, `SELECT schemaname, relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
			autovacuum_count, autoanalyze_count AS `+profilerMark+`
		FROM pg_stat_user_tables WHERE schemaname = ANY($1)`, p.schemas)
	if err != nil {
		return nil, fmt.Errorf("database profile: read pg_stat_user_tables of schemas %v: %w", p.schemas, err)
	}
	for rows.Next() {
		var name [2]string
		var t tupleCounters
		if err := rows.Scan(&name[0], &name[1], &t.ins, &t.upd, &t.hot, &t.del, &t.vacuums, &t.analyzes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("database profile: read pg_stat_user_tables of schemas %v: %w", p.schemas, err)
		}
		s.tables[name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("database profile: read pg_stat_user_tables of schemas %v: %w", p.schemas, err)
	}
	if p.pgssView != "" {
		if s.statements, err = p.statements(ctx); err != nil {
			return nil, fmt.Errorf("database profile: read %s: %w", p.pgssView, err)
		}
	}
	return s, nil
}

// A PostgreSQL 15 backend flushes its table, database and WAL counters to shared memory at most
// once a second, and one that has gone idle only 10s later: a snapshot right after the load
// would miss much of it, and the next row's would count it. So before each snapshot every
// connection that may hold pending counters is made to flush them (pg_stat_force_next_flush),
// and the snapshot is taken again until the tables' counters hold still.
const (
	statsSettleCheck = 250 * time.Millisecond
	statsSettleLimit = 30 * time.Second
)

// flushSQL makes the backend that runs it flush its pending statistics before it answers. It
// reads a table (pg_database) because a backend with no table's counters pending flushes
// nothing, not even its count of commits, which the profile must see to subtract its own. Sent
// with the simple protocol, it is exactly one transaction (a prepare would be another).
const flushSQL = "SELECT pg_stat_force_next_flush() AS " + profilerMark + " FROM pg_database WHERE datname = current_database()"

// flush makes every connection the profile knows of flush its pending statistics.
func (p *dbProfiler) flush(ctx context.Context) error {
	for _, f := range p.flushers {
		n, err := f(ctx)
		p.own.Add(int64(n))
		if err != nil {
			return fmt.Errorf("database profile: %w", err)
		}
	}
	for _, c := range []*pgx.Conn{p.conn, p.sampler} {
		p.own.Add(1)
		if _, err := c.Exec(ctx, flushSQL, pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("database profile: pg_stat_force_next_flush() (PostgreSQL 15 or later): %w", err)
		}
	}
	return nil
}

// settle flushes every pending counter and returns a snapshot taken then, once the schemas'
// table counters hold still between two snapshots.
func (p *dbProfiler) settle(ctx context.Context) (*dbSnapshot, error) {
	deadline := time.Now().Add(statsSettleLimit)
	if err := p.flush(ctx); err != nil {
		return nil, err
	}
	prev, err := p.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	for {
		if err := sleep(ctx, statsSettleCheck); err != nil {
			return nil, err
		}
		if err := p.flush(ctx); err != nil {
			return nil, err
		}
		cur, err := p.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		if maps.Equal(prev.tables, cur.tables) {
			return prev, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("database profile: the statistics of the tables of schemas %v were still changing %s after the load ended, "+
				"although every connection of the servers flushed its own: is something else writing to them?",
				p.schemas, statsSettleLimit)
		}
		prev = cur
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitState is what a sampled connection was doing: its state, and its wait event (empty when
// it waited for nothing: on CPU, or ready to run).
type waitState struct{ state, event string }

// sampleEvery is how often sample reads pg_stat_activity.
const sampleEvery = 20 * time.Millisecond

// sample reads the states of app's connections every sampleEvery until stop is closed. It never
// cancels a query (which could cost pgx the connection): it stops between two.
func (p *dbProfiler) sample(ctx context.Context, app string, stop <-chan struct{}) (map[waitState]int, int, error) {
	counts := map[waitState]int{}
	samples := 0
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return counts, samples, nil
		case <-ctx.Done():
			return counts, samples, ctx.Err()
		case <-t.C:
		}
		p.own.Add(1)
		rows, err := p.sampler.Query(ctx, `SELECT coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, '') AS `+profilerMark+`
			FROM pg_stat_activity WHERE application_name = $1`, app)
		if err != nil {
			return counts, samples, fmt.Errorf("database profile: sample pg_stat_activity: %w", err)
		}
		var batch []waitState
		for rows.Next() {
			var w waitState
			if err := rows.Scan(&w.state, &w.event); err != nil {
				rows.Close()
				return counts, samples, fmt.Errorf("database profile: sample pg_stat_activity: %w", err)
			}
			batch = append(batch, w)
		}
		if err := rows.Err(); err != nil {
			return counts, samples, fmt.Errorf("database profile: sample pg_stat_activity: %w", err)
		}
		for _, w := range batch {
			counts[w]++
		}
		samples++
	}
}

// findPostmaster returns the postmaster's pid when PostgreSQL's processes are visible here: the
// parent of the profiler's own backend, both named postgres in /proc. Otherwise 0 and why.
func (p *dbProfiler) findPostmaster(ctx context.Context) (int, string) {
	const notHere = "not measured: PostgreSQL's processes are not visible in this machine's /proc (a server elsewhere?)"
	var backend int
	if err := p.queryRow(ctx, `SELECT pg_backend_pid() AS `+profilerMark).Scan(&backend); err != nil {
		return 0, fmt.Sprintf("not measured: pg_backend_pid(): %v", err)
	}
	host := p.conn.Config().Host
	if !strings.HasPrefix(host, "/") && host != "localhost" && host != "127.0.0.1" && host != "::1" {
		return 0, notHere
	}
	st, err := readProcStat(backend)
	if err != nil || st.comm != "postgres" {
		return 0, notHere
	}
	pm, err := readProcStat(st.ppid)
	if err != nil || pm.comm != "postgres" {
		return 0, notHere
	}
	return st.ppid, ""
}

type procStat struct {
	comm           string
	ppid           int
	self, children time.Duration // user + system CPU time, of the process and of its reaped children
}

// userHZ is the unit of /proc/PID/stat's times, fixed at 100 per second on Linux.
const userHZ = 100

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses, so split at the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 15", pid, len(f))
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	tick := func(v int64) time.Duration { return time.Duration(v) * time.Second / userHZ }
	ppid, _ := strconv.Atoi(f[1])
	// Fields 14 to 17 of stat (utime, stime, cutime, cstime) are 11 to 14 here.
	return procStat{comm: s[open+1 : end], ppid: ppid, self: tick(n(11) + n(12)), children: tick(n(13) + n(14))}, nil
}

// cpuTimes is PostgreSQL's CPU time so far: all of it (the postmaster, its live children, and
// the children it has reaped, such as finished autovacuum workers), and per pid of app's backends.
func (p *dbProfiler) cpuTimes(ctx context.Context, app string) (total time.Duration, backends map[int]time.Duration, err error) {
	pm, err := readProcStat(p.postmaster)
	if err != nil {
		return 0, nil, fmt.Errorf("database profile: read the postmaster's CPU time: %w", err)
	}
	total = pm.self + pm.children
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, fmt.Errorf("database profile: list /proc: %w", err)
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == p.postmaster {
			total += st.self
		}
	}
	p.own.Add(1)
	rows, err := p.conn.Query(ctx, `SELECT pid AS `+profilerMark+` FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		return 0, nil, fmt.Errorf("database profile: list the backends of %s: %w", app, err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, nil, fmt.Errorf("database profile: list the backends of %s: %w", app, err)
	}
	backends = map[int]time.Duration{}
	for _, pid := range pids {
		if st, err := readProcStat(int(pid)); err == nil {
			backends[int(pid)] = st.self
		}
	}
	return total, backends, nil
}

// dbProfile is what PostgreSQL spent on one row's load: per request, unless said otherwise.
type dbProfile struct {
	Row      string  `json:"row"`
	Label    string  `json:"label"`
	Server   string  `json:"server"`
	File     string  `json:"file"`
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	ReqPerS  float64 `json:"req_per_s"`
	// From pg_stat_statements (nil without it): the statements' execution and planning time, and
	// the WAL they wrote.
	ExecMS   *float64 `json:"exec_ms_per_request,omitempty"`
	PlanMS   *float64 `json:"plan_ms_per_request,omitempty"`
	StmtWALB *float64 `json:"statement_wal_bytes_per_request,omitempty"`
	// From pg_stat_database (this database, the profiler's own transactions subtracted).
	Commits   float64 `json:"commits_per_request"`
	Rollbacks float64 `json:"rollbacks_per_request"`
	// From pg_stat_wal: the whole server's WAL, background processes included.
	WALRecords  float64 `json:"wal_records_per_request"`
	WALFPI      float64 `json:"wal_fpi_per_request"`
	WALBytes    float64 `json:"wal_bytes_per_request"`
	WALWrites   float64 `json:"wal_writes_per_request"`
	WALSyncs    float64 `json:"wal_syncs_per_request"`
	Checkpoints int64   `json:"checkpoints"`
	// PostgreSQL's CPU time (nil when its processes are not visible here): all of it, and the
	// part of the server's own backends.
	CPUUS        *float64 `json:"postgres_cpu_us_per_request,omitempty"`
	BackendCPUUS *float64 `json:"backends_cpu_us_per_request,omitempty"`
	// From pg_stat_user_tables, per table of the server's schema.
	Tables map[string]tuplesPerRequest `json:"tables"`
	// Connections is how many connections the server had open, on average over the samples: its
	// pool's, and a Store's listener while one is open (it runs a transaction for every
	// notification it reads, which the commits then include).
	Connections float64 `json:"server_connections"`

	statements []stmtProfile
	// evicted: pg_stat_statements dropped entries while the load ran, so statements may be missing.
	evicted     bool
	waits       map[waitState]int
	samples     int
	schema, app string
	notes       []string
}

type tuplesPerRequest struct {
	Inserted   float64 `json:"inserted"`
	Updated    float64 `json:"updated"`
	HOTUpdated float64 `json:"hot_updated"`
	Deleted    float64 `json:"deleted"`
	// Autovacuum's runs on the table during the load, in all (not per request): they write WAL
	// and commit transactions that the load's figures then include.
	Autovacuums  int64 `json:"autovacuums"`
	Autoanalyzes int64 `json:"autoanalyzes"`
}

type stmtProfile struct {
	text string
	pgssCounters
}

// runDBProfile runs one row's load on s for d, between two settled snapshots, and returns what
// PostgreSQL spent on it; after is the closing snapshot, the next row's opening one.
func (p *dbProfiler) runDBProfile(ctx context.Context, l *load, s *benchServer, schema, app string, row dbProfileRow, d time.Duration, before *dbSnapshot) (prof *dbProfile, after *dbSnapshot, err error) {
	prof = &dbProfile{Row: row.name(), Label: row.label(), Server: row.server, schema: schema, app: app}
	var cpuBefore time.Duration
	var backendsBefore map[int]time.Duration
	if p.postmaster != 0 {
		if cpuBefore, backendsBefore, err = p.cpuTimes(ctx, app); err != nil {
			return nil, nil, err
		}
	} else {
		prof.notes = append(prof.notes, "PostgreSQL CPU: "+p.procNote)
	}
	stopSampling := make(chan struct{})
	type sampled struct {
		counts map[waitState]int
		n      int
		err    error
	}
	sampleDone := make(chan sampled, 1)
	go func() {
		c, n, err := p.sample(ctx, app, stopSampling)
		sampleDone <- sampled{c, n, err}
	}()

	var seg *segment
	switch row.kind {
	case kindFirst:
		seg, err = l.first(ctx, s, "pgss-"+row.server, d)
	case kindReplay:
		seg, err = l.replay(ctx, s, d)
	}
	close(stopSampling)
	var smp sampled
	select {
	case smp = <-sampleDone:
	case <-time.After(30 * time.Second):
		return nil, nil, fmt.Errorf("database profile: sampling pg_stat_activity did not stop within 30s of the %s load ending", row.name())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("database profile, %s: %w", row.label(), err)
	}
	if smp.err != nil {
		return nil, nil, smp.err
	}
	if seg.Requests == 0 {
		return nil, nil, fmt.Errorf("database profile, %s: no request completed in %s", row.label(), d)
	}
	prof.waits, prof.samples = smp.counts, smp.n
	if smp.n > 0 {
		all := 0
		for _, c := range smp.counts {
			all += c
		}
		prof.Connections = float64(all) / float64(smp.n)
	}
	if p.postmaster != 0 {
		cpuAfter, backendsAfter, err := p.cpuTimes(ctx, app)
		if err != nil {
			return nil, nil, err
		}
		var backends time.Duration
		for pid, t := range backendsAfter {
			if t0, ok := backendsBefore[pid]; ok {
				backends += t - t0
			}
		}
		n := float64(seg.Requests)
		prof.CPUUS = ptr(float64((cpuAfter - cpuBefore).Microseconds()) / n)
		prof.BackendCPUUS = ptr(float64(backends.Microseconds()) / n)
	}
	if after, err = p.settle(ctx); err != nil {
		return nil, nil, err
	}
	prof.fill(seg, before, after, p)
	return prof, after, nil
}

// fill computes the per-request figures from the two snapshots around seg.
func (prof *dbProfile) fill(seg *segment, before, after *dbSnapshot, p *dbProfiler) {
	n := float64(seg.Requests)
	prof.Requests, prof.Seconds, prof.ReqPerS = seg.Requests, seg.Elapsed.Seconds(), seg.ReqPerS
	// Each of the profiler's queries between the snapshots committed a transaction of its own.
	own := after.own - before.own
	prof.Commits = float64(after.commits-before.commits-own) / n
	prof.Rollbacks = float64(after.rollbacks-before.rollbacks) / n
	prof.WALRecords = float64(after.walRecords-before.walRecords) / n
	prof.WALFPI = float64(after.walFPI-before.walFPI) / n
	prof.WALBytes = (after.walBytes - before.walBytes) / n
	prof.WALWrites = float64(after.walWrites-before.walWrites) / n
	prof.WALSyncs = float64(after.walSyncs-before.walSyncs) / n
	prof.Checkpoints = after.checkpoints - before.checkpoints
	prof.Tables = map[string]tuplesPerRequest{}
	for name, a := range after.tables {
		if name[0] != prof.schema {
			continue
		}
		b := before.tables[name]
		prof.Tables[name[1]] = tuplesPerRequest{
			Inserted: float64(a.ins-b.ins) / n, Updated: float64(a.upd-b.upd) / n,
			HOTUpdated: float64(a.hot-b.hot) / n, Deleted: float64(a.del-b.del) / n,
			Autovacuums: a.vacuums - b.vacuums, Autoanalyzes: a.analyzes - b.analyzes,
		}
	}
	if after.statements == nil || before.statements == nil {
		prof.notes = append(prof.notes, "pg_stat_statements: "+p.pgssNote)
		return
	}
	var exec, plan, wal float64
	for k, a := range after.statements {
		b := before.statements[k] // zero when the statement is new
		d := stmtProfile{text: a.text, pgssCounters: pgssCounters{
			plans: a.plans - b.plans, calls: a.calls - b.calls, rows: a.rows - b.rows,
			planMS: a.planMS - b.planMS, execMS: a.execMS - b.execMS,
			blksHit: a.blksHit - b.blksHit, blksRead: a.blksRead - b.blksRead,
			blksDirtied: a.blksDirtied - b.blksDirtied, blksW: a.blksW - b.blksW,
			walRecords: a.walRecords - b.walRecords, walFPI: a.walFPI - b.walFPI, walBytes: a.walBytes - b.walBytes,
		}}
		if d.calls == 0 && d.plans == 0 {
			continue
		}
		exec += d.execMS
		plan += d.planMS
		wal += d.walBytes
		prof.statements = append(prof.statements, d)
	}
	slices.SortFunc(prof.statements, func(x, y stmtProfile) int { return cmp.Compare(y.execMS, x.execMS) })
	prof.ExecMS, prof.PlanMS, prof.StmtWALB = ptr(exec/n), ptr(plan/n), ptr(wal/n)
	if len(after.statements) < len(before.statements) {
		prof.evicted = true
		prof.notes = append(prof.notes, "pg_stat_statements: entries were evicted while the load ran (raise pg_stat_statements.max): some statements may be missing")
	}
}

// summary is the profile's figures in one line.
func (prof *dbProfile) summary() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d requests in %.1fs (%.0f req/s): ", prof.Requests, prof.Seconds, prof.ReqPerS)
	if prof.ExecMS != nil {
		fmt.Fprintf(&sb, "statements %.3f ms exec + %.3f ms plan/req, their WAL %.0f B/req; ", *prof.ExecMS, *prof.PlanMS, *prof.StmtWALB)
	} else {
		sb.WriteString("no pg_stat_statements; ")
	}
	fmt.Fprintf(&sb, "commits %.2f/req, rollbacks %.2f/req; WAL (server) %.0f B/req, %.1f records/req, %.2f FPI/req, %.2f syncs/req",
		prof.Commits, prof.Rollbacks, prof.WALBytes, prof.WALRecords, prof.WALFPI, prof.WALSyncs)
	if prof.Checkpoints > 0 {
		fmt.Fprintf(&sb, " (%d checkpoint(s) during the load: FPIs inflate the WAL)", prof.Checkpoints)
	}
	if prof.CPUUS != nil {
		fmt.Fprintf(&sb, "; PostgreSQL CPU %.0f µs/req, %.0f of it the server's connections'", *prof.CPUUS, *prof.BackendCPUUS)
	}
	fmt.Fprintf(&sb, "; %.1f connections", prof.Connections)
	if k, ok := prof.Tables[idem.DefaultTable]; ok {
		fmt.Fprintf(&sb, "; key table: %.2f inserts, %.2f updates (%.2f HOT)/req", k.Inserted, k.Updated, k.HOTUpdated)
	}
	return sb.String()
}

// shortSQL is a statement's text on one line, without the schema's name, cut to n characters.
func shortSQL(text, schema string, n int) string {
	text = strings.ReplaceAll(text, pgx.Identifier{schema}.Sanitize()+".", "")
	text = strings.Join(strings.Fields(text), " ")
	if utf8.RuneCountInString(text) <= n {
		return text
	}
	return string([]rune(text)[:n-1]) + "…"
}

// write writes the profile's file.
func (prof *dbProfile) write(w io.Writer, pg map[string]string, clients int) {
	n := float64(prof.Requests)
	fmt.Fprintf(w, "Database profile: %s (%s server), %d clients for %.1fs\n", prof.Label, prof.Server, clients, prof.Seconds)
	fmt.Fprintf(w, "PostgreSQL %s (fsync=%s, synchronous_commit=%s, full_page_writes=%s); the server's schema %s\n\n",
		pg["server_version"], pg["fsync"], pg["synchronous_commit"], pg["full_page_writes"], prof.schema)
	fmt.Fprintf(w, "summary: %s\n", prof.summary())
	for _, note := range prof.notes {
		fmt.Fprintf(w, "note: %s\n", note)
	}

	fmt.Fprintf(w, "\nTuples written per request (pg_stat_user_tables, schema %s):\n\n", prof.schema)
	tables := slices.Sorted(maps.Keys(prof.Tables))
	rows := [][]string{{"table", "inserted", "updated", "HOT updated", "HOT share", "deleted", "autovacuum runs (all)", "autoanalyze runs (all)"}}
	for _, t := range tables {
		c := prof.Tables[t]
		share := ""
		if c.Updated > 0 {
			share = fmt.Sprintf("%.0f%%", 100*c.HOTUpdated/c.Updated)
		}
		rows = append(rows, []string{t, fmt.Sprintf("%.2f", c.Inserted), fmt.Sprintf("%.2f", c.Updated),
			fmt.Sprintf("%.2f", c.HOTUpdated), share, fmt.Sprintf("%.2f", c.Deleted),
			strconv.FormatInt(c.Autovacuums, 10), strconv.FormatInt(c.Autoanalyzes, 10)})
	}
	writeAligned(w, rows)

	if prof.statements != nil {
		fmt.Fprintf(w, "\nStatements (pg_stat_statements, every user of this database, the profiler's own left out), by total exec time;\n"+
			"per request unless said otherwise; blocks are shared buffers (hit, read, dirtied, written):\n\n")
		rows := [][]string{{"#", "statement", "calls/req", "mean ms", "total ms", "plan ms", "rows/req", "hit/req", "read/req", "dirtied/req", "written/req", "WAL rec/req", "FPI/req", "WAL B/req"}}
		var tot pgssCounters
		for i, s := range prof.statements {
			mean := 0.0
			if s.calls > 0 {
				mean = s.execMS / float64(s.calls)
			}
			rows = append(rows, []string{strconv.Itoa(i + 1), shortSQL(s.text, prof.schema, 60),
				fmt.Sprintf("%.2f", float64(s.calls)/n), fmt.Sprintf("%.3f", mean), fmt.Sprintf("%.0f", s.execMS), fmt.Sprintf("%.0f", s.planMS),
				fmt.Sprintf("%.2f", float64(s.rows)/n), fmt.Sprintf("%.1f", float64(s.blksHit)/n), fmt.Sprintf("%.2f", float64(s.blksRead)/n),
				fmt.Sprintf("%.2f", float64(s.blksDirtied)/n), fmt.Sprintf("%.2f", float64(s.blksW)/n),
				fmt.Sprintf("%.2f", float64(s.walRecords)/n), fmt.Sprintf("%.2f", float64(s.walFPI)/n), fmt.Sprintf("%.0f", s.walBytes/n)})
			tot.calls += s.calls
			tot.execMS += s.execMS
			tot.planMS += s.planMS
			tot.rows += s.rows
			tot.blksHit += s.blksHit
			tot.blksRead += s.blksRead
			tot.blksDirtied += s.blksDirtied
			tot.blksW += s.blksW
			tot.walRecords += s.walRecords
			tot.walFPI += s.walFPI
			tot.walBytes += s.walBytes
		}
		rows = append(rows, []string{"", "all statements", fmt.Sprintf("%.2f", float64(tot.calls)/n), "", fmt.Sprintf("%.0f", tot.execMS), fmt.Sprintf("%.0f", tot.planMS),
			fmt.Sprintf("%.2f", float64(tot.rows)/n), fmt.Sprintf("%.1f", float64(tot.blksHit)/n), fmt.Sprintf("%.2f", float64(tot.blksRead)/n),
			fmt.Sprintf("%.2f", float64(tot.blksDirtied)/n), fmt.Sprintf("%.2f", float64(tot.blksW)/n),
			fmt.Sprintf("%.2f", float64(tot.walRecords)/n), fmt.Sprintf("%.2f", float64(tot.walFPI)/n), fmt.Sprintf("%.0f", tot.walBytes/n)})
		writeAligned(w, rows)
		fmt.Fprintf(w, "\nExecution time leaves out the commit: a COMMIT's flush of the WAL, and an autocommit statement's, happen after\n"+
			"pg_stat_statements stops its clock. The sampled states below show that time.\n")
	}

	if prof.samples > 0 {
		fmt.Fprintf(w, "\nStates of the server's connections (pg_stat_activity, application_name %s), sampled every %s, %d samples;\n"+
			"'busy ms/req' is the sampled connection time per request (connections × seconds / requests):\n\n",
			prof.app, sampleEvery, prof.samples)
		type entry struct {
			w waitState
			c int
		}
		var es []entry
		for w, c := range prof.waits {
			es = append(es, entry{w, c})
		}
		slices.SortFunc(es, func(a, b entry) int { return b.c - a.c })
		rows := [][]string{{"state", "wait event", "connections on average", "busy ms/req"}}
		for _, e := range es {
			avg := float64(e.c) / float64(prof.samples)
			ev := e.w.event
			if ev == "" {
				ev = "none (on CPU or ready to run)"
			}
			busy := ""
			if e.w.state != "idle" {
				busy = fmt.Sprintf("%.3f", avg*prof.Seconds*1000/n)
			}
			rows = append(rows, []string{e.w.state, ev, fmt.Sprintf("%.2f", avg), busy})
		}
		writeAligned(w, rows)
	}

	if prof.statements != nil {
		fmt.Fprintf(w, "\nStatements in full (normalised by pg_stat_statements):\n\n")
		for i, s := range prof.statements {
			fmt.Fprintf(w, "%d. %s\n", i+1, shortSQL(s.text, prof.schema, 1<<20))
		}
	}
}

// writeAligned writes rows as a Markdown table, columns padded.
func writeAligned(w io.Writer, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
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
	line(rows[0])
	sep := make([]string, len(widths))
	for i, n := range widths {
		sep[i] = strings.Repeat("-", n)
	}
	line(sep)
	for _, row := range rows[1:] {
		line(row)
	}
}

// profileDatabase runs every row of dbProfileRows for secs seconds, one server at a time, and
// writes each one's DIR/pgss-<server>-<row>.txt, and all their summaries to DIR/pgss-summary.txt
// and DIR/pgss-summary.json. It adds the files to files, and returns the profiles.
func profileDatabase(ctx context.Context, tb testing.TB, l *load, servers map[string]*benchServer, schemas map[string]*idemtest.Schema,
	pg map[string]string, dir string, secs int, files map[string]string) []*dbProfile {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("profile directory: %v", err)
	}
	var names []string
	for _, sch := range schemas {
		names = append(names, sch.Name)
	}
	p, err := newDBProfiler(ctx, schemas[serverCeiling].URL, names)
	if err != nil {
		tb.Fatal(err)
	}
	defer p.close()
	for _, s := range servers {
		p.flushers = append(p.flushers, func(ctx context.Context) (int, error) { return s.flushStats(ctx, l.client) })
	}
	for _, sch := range schemas {
		p.flushers = append(p.flushers, func(ctx context.Context) (int, error) { return flushStats(ctx, sch.Pool) })
	}
	// The first snapshot also waits for the rounds' and the Go profiles' counters to settle.
	snap, err := p.settle(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var profs []*dbProfile
	for _, row := range dbProfileRows {
		sch := schemas[row.server]
		prof, after, err := p.runDBProfile(ctx, l, servers[row.server], sch.Name, benchAppName(row.server), row, time.Duration(secs)*time.Second, snap)
		if err != nil {
			tb.Fatal(err)
		}
		snap = after
		prof.File = filepath.Join(dir, "pgss-"+row.name()+".txt")
		var buf bytes.Buffer
		prof.write(&buf, pg, l.clients)
		if err := os.WriteFile(prof.File, buf.Bytes(), 0o644); err != nil {
			tb.Fatalf("database profile: write %s: %v", prof.File, err)
		}
		files["pgss-"+row.name()] = prof.File
		profs = append(profs, prof)
	}
	var sum bytes.Buffer
	writeDBSummaries(&sum, profs)
	files["pgss-summary"] = filepath.Join(dir, "pgss-summary.txt")
	if err := os.WriteFile(files["pgss-summary"], sum.Bytes(), 0o644); err != nil {
		tb.Fatalf("database profile: write %s: %v", files["pgss-summary"], err)
	}
	js, err := json.MarshalIndent(profs, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	files["pgss-json"] = filepath.Join(dir, "pgss-summary.json")
	if err := os.WriteFile(files["pgss-json"], append(js, '\n'), 0o644); err != nil {
		tb.Fatalf("database profile: write %s: %v", files["pgss-json"], err)
	}
	return profs
}

// writeDBSummaries writes one line per profile, and the notes they share.
func writeDBSummaries(w io.Writer, profs []*dbProfile) {
	if len(profs) == 0 {
		return
	}
	fmt.Fprintf(w, "database profiles (one server under load at a time; per request):\n")
	notes := map[string]bool{}
	for _, prof := range profs {
		fmt.Fprintf(w, "  %-40s %s\n", prof.Label+":", prof.summary())
		for _, n := range prof.notes {
			notes[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(notes)) {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintf(w, "  files: %s\n", filepath.Join(filepath.Dir(profs[0].File), "pgss-*.txt"))
}

// TestDatabaseProfile checks the database profile's counts on real PostgreSQL: a lease-mode
// server in this process serves first executions and then replays, and the profile must count
// one key row inserted and updated, one payment and one ledger event per first execution, and
// nothing written per replay. These counts are exact only if every connection's pending
// statistics were flushed before the snapshots. The file must say whether pg_stat_statements
// was there (make test's server lacks it; PG_STATEMENTS=1 scripts/with-pg.sh has it).
func TestDatabaseProfile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sch := idemtest.TestSchema(t, nil)
	if err := payments.Migrate(ctx, sch.Pool); err != nil {
		t.Fatal(err)
	}
	// The server's own pool, named the way the profile finds a bench server's connections.
	app := benchAppName("test-" + sch.Name)
	cfg, err := pgxpool.ParseConfig(sch.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = sch.Name
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h, err := benchHandler(serverLease, pool, sch.Name, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	l := newLoad(4)
	defer l.client.CloseIdleConnections()
	s := &benchServer{mode: serverLease, url: srv.URL}
	for i := range replayKeys {
		if st, replayed, _, err := l.send(ctx, s, fmt.Sprintf("replay-%d", i)); err != nil || st != http.StatusCreated || replayed {
			t.Fatalf("create replay key %d: status %d, replayed %v, error %v; want 201, not replayed", i, st, replayed, err)
		}
	}

	p, err := newDBProfiler(ctx, sch.URL, []string{sch.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	p.flushers = []func(context.Context) (int, error){
		func(ctx context.Context) (int, error) { return flushStats(ctx, pool) },
		func(ctx context.Context) (int, error) { return flushStats(ctx, sch.Pool) },
	}
	snap, err := p.settle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		row                        dbProfileRow
		keyIns, keyUpd, pay, event float64
	}{
		{dbProfileRow{serverLease, kindFirst}, 1, 1, 1, 1},
		{dbProfileRow{serverLease, kindReplay}, 0, 0, 0, 0},
	} {
		prof, after, err := p.runDBProfile(ctx, l, s, sch.Name, app, tc.row, time.Second, snap)
		if err != nil {
			t.Fatal(err)
		}
		snap = after
		keys, pays, events := prof.Tables[idem.DefaultTable], prof.Tables["payments"], prof.Tables["payment_events"]
		if keys.Inserted != tc.keyIns || keys.Updated != tc.keyUpd || keys.HOTUpdated > keys.Updated || keys.Deleted != 0 ||
			pays.Inserted != tc.pay || events.Inserted != tc.event {
			t.Errorf("%s, %d requests: per request, key table %+v, payments %+v, payment_events %+v; "+
				"want %g key rows inserted and %g updated (HOT at most as many), none deleted, %g payment and %g event inserted",
				tc.row.label(), prof.Requests, keys, pays, events, tc.keyIns, tc.keyUpd, tc.pay, tc.event)
		}
		if prof.samples == 0 || len(prof.waits) == 0 {
			t.Errorf("%s: %d samples of pg_stat_activity, %d states seen; want some of each (are the server's connections named %s?)",
				tc.row.label(), prof.samples, len(prof.waits), app)
		}
		if p.postmaster != 0 && (prof.CPUUS == nil || *prof.CPUUS <= 0) {
			t.Errorf("%s: PostgreSQL's processes are visible here (postmaster %d) but no CPU time was counted", tc.row.label(), p.postmaster)
		}
		var buf bytes.Buffer
		prof.write(&buf, pgSettings(t, sch.Pool), l.clients)
		out := buf.String()
		if !strings.Contains(out, "Tuples written per request") {
			t.Errorf("%s: the profile has no table of tuples:\n%s", tc.row.label(), out)
		}
		if p.pgssView == "" {
			if !strings.Contains(out, "pg_stat_statements: not available") {
				t.Errorf("%s: pg_stat_statements is not available (%s) but the profile does not say so:\n%s", tc.row.label(), p.pgssNote, out)
			}
			continue
		}
		if prof.evicted {
			// A server shared with many other tests (each on its own schema, so with statements
			// of its own) can outgrow pg_stat_statements.max: the counts below may then miss
			// entries through no fault of the runtime.
			t.Logf("%s: pg_stat_statements evicted entries while the load ran; the statement counts are not checked", tc.row.label())
			continue
		}
		// With pg_stat_statements: the replay check, which names this schema's key table, ran
		// once per request, and so did the claim's insert (sql/replay.sql and
		// sql/claim_fast_lease.sql, in the claim's batch; on a replay the insert writes nothing,
		// which the tuple counts above check), whatever other tests ran on the server meanwhile. Nothing fails on purpose on
		// these paths, so pg_stat_statements, which records only statements that finish, sees
		// every one.
		checks, claims := int64(0), int64(0)
		for _, st := range prof.statements {
			text := strings.TrimSpace(st.text)
			if !strings.Contains(text, sch.Name) {
				continue
			}
			if strings.Contains(text, "SELECT k.fingerprint, k.status") {
				checks += st.calls
			}
			if strings.Contains(text, "INSERT INTO") && strings.Contains(text, idem.DefaultTable) || strings.HasPrefix(text, "WITH cur AS") {
				claims += st.calls
			}
		}
		wantChecks, wantClaims := int64(prof.Requests), int64(prof.Requests)
		if checks != wantChecks || claims != wantClaims {
			t.Errorf("%s: %d requests but %d finished replay checks and %d claims in pg_stat_statements; want %d and %d:\n%s",
				tc.row.label(), prof.Requests, checks, claims, wantChecks, wantClaims, out)
		}
	}
}
