package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// A Store created while its database is down does not guess its topology: it refuses to claim
// (ErrStoreUnavailable, no handler run) until the database answers, then asks and claims. On
// b97f4c3 the Citus question was asked once, at NewStore, and a failure read as "not Citus".
func TestTopologyDetectedWhenTheDatabaseComesUp(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	var down atomic.Bool
	down.Store(true)
	cfg, err := pgxpool.ParseConfig(sch.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig = sch.Pool.Config().ConnConfig.Copy()
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("the database is not up yet")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := idem.NewStore(pool, &idem.Config{Schema: sch.Name, Table: sch.Table, StoreTimeout: time.Second})
	if err != nil {
		t.Fatalf("NewStore with the database down: %v; want a Store that asks later", err)
	}
	t.Cleanup(s.Close)
	if got := s.Topology(); got != idem.TopologyDetect {
		t.Fatalf("Topology with the database down = %s; want detect (unknown)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runs := 0
	fn := func(context.Context, pgx.Tx) (*idem.Outcome, error) { runs++; return &idem.Outcome{Status: 201}, nil }
	p := &idem.DoParams{Key: "k", Operation: "op", Fingerprint: "fp"}
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		p.Claim = mode
		if _, err := s.Do(ctx, p, fn); !errors.Is(err, idem.ErrStoreUnavailable) || runs != 0 {
			t.Fatalf("%s, Do before the topology is known: %v, %d runs; want ErrStoreUnavailable and no run", mode, err, runs)
		}
	}
	down.Store(false)
	p.Claim = idem.ClaimLease
	if r, err := s.Do(ctx, p, fn); err != nil || r.Replayed || runs != 1 {
		t.Fatalf("Do once the database is up: %+v, %v, %d runs; want one run", r, err, runs)
	}
	if got := s.Topology(); got != idem.TopologyPostgres {
		t.Fatalf("Topology once the database answered = %s; want postgres", got)
	}
}

// Config.Topology names the topology without asking, and the deprecated Config.Pooler maps onto
// it; an unknown value is refused.
func TestTopologyConfigured(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	for _, tc := range []struct {
		cfg  idem.Config
		want idem.Topology
	}{
		{idem.Config{}, idem.TopologyPostgres},
		{idem.Config{Topology: idem.TopologyCitus}, idem.TopologyCitus},
		{idem.Config{Topology: idem.TopologyPooler}, idem.TopologyPooler},
		{idem.Config{Pooler: idem.PoolerNone}, idem.TopologyPostgres},
		{idem.Config{Pooler: idem.PoolerTransaction}, idem.TopologyPooler},
		{idem.Config{Topology: idem.TopologyCitus, Pooler: idem.PoolerTransaction}, idem.TopologyCitus},
	} {
		c := tc.cfg
		c.Schema, c.Table = sch.Name, sch.Table
		pool := sch.Pool
		if tc.want == idem.TopologyPooler { // the pool's default exec mode is refused behind a pooler
			pc := sch.Pool.Config().Copy()
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
			var err error
			if pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
		}
		s, err := idem.NewStore(pool, &c)
		if err != nil {
			t.Fatalf("%+v: %v", tc.cfg, err)
		}
		if got := s.Topology(); got != tc.want {
			t.Errorf("Topology %s, Pooler %s: the Store settled on %s; want %s", tc.cfg.Topology, tc.cfg.Pooler, got, tc.want)
		}
		s.Close()
	}
	if _, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Topology: 42}); err == nil {
		t.Error("NewStore with Topology 42: no error")
	}
	if _, err := idem.NewStore(sch.Pool, &idem.Config{Schema: sch.Name, Topology: idem.TopologyPooler}); !errors.Is(err, idem.ErrPoolerMode) {
		t.Errorf("NewStore with TopologyPooler and pgx's statement cache: %v; want ErrPoolerMode", err)
	}
}

// Citus answers a COMMIT it could not carry out on a worker with XX000 "could not commit
// transaction …": whether the work committed is the store's question (503), not the handler's
// (500). On b97f4c3 it was not counted as the store's.
func TestCitusCommitFailureIsTheStores(t *testing.T) {
	t.Parallel()
	err := &pgconn.PgError{Severity: "ERROR", Code: "XX000", Message: "could not commit transaction on any active node"}
	if !idem.IsStoreUnavailable(err) {
		t.Errorf("IsStoreUnavailable(%v) = false; want true", err)
	}
	if other := (&pgconn.PgError{Code: "XX000", Message: "cache lookup failed for type 42"}); idem.IsStoreUnavailable(other) {
		t.Errorf("IsStoreUnavailable(%v) = true; want false (an internal error of another kind)", other)
	}
}

// Every statement of the request path works under generic plans (plan_cache_mode =
// force_generic_plan, which Citus needs of a statement to route it by its parameters), on each
// statement set: executions, replays, a takeover and a mismatch.
func TestGenericPlans(t *testing.T) {
	t.Parallel()
	for _, topo := range []idem.Topology{idem.TopologyPostgres, idem.TopologyCitus} {
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			t.Run(topo.String()+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				sch := idemtest.TestSchema(t, nil)
				pc := sch.Pool.Config().Copy()
				pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
				pool, err := pgxpool.NewWithConfig(context.Background(), pc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				s, err := idem.NewStore(pool, &idem.Config{Schema: sch.Name, Table: sch.Table, Topology: topo})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var mode0 string
				if err := pool.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode0); err != nil || mode0 != "force_generic_plan" {
					t.Fatalf("plan_cache_mode = %q, %v", mode0, err)
				}
				fn := func(context.Context, pgx.Tx) (*idem.Outcome, error) {
					return &idem.Outcome{Status: 201, Body: []byte("ok")}, nil
				}
				for i := range 8 { // past the five custom plans PostgreSQL tries by default
					p := &idem.DoParams{Key: "k" + string(rune('a'+i)), Operation: "op", Fingerprint: "fp", Claim: mode}
					for j, replay := range []bool{false, true} {
						if r, err := s.Do(ctx, p, fn); err != nil || r.Replayed != replay {
							t.Fatalf("key %d, request %d: %+v, %v; want replayed=%v", i, j+1, r, err, replay)
						}
					}
					other := *p
					other.Fingerprint = "other"
					if _, err := s.Do(ctx, &other, fn); !errors.Is(err, idem.ErrKeyReused) {
						t.Fatalf("key %d, another request: %v; want ErrKeyReused", i, err)
					}
				}
				if _, err := s.KeyStats(ctx); err != nil {
					t.Fatalf("KeyStats: %v", err)
				}
			})
		}
	}
}

// A configured topology is checked against the database: TopologyCitus on plain PostgreSQL (no
// Citus extension) is refused at NewStore with ErrTopologyMismatch and its reason; when the
// database cannot be asked at NewStore, the first request that reaches it is refused the same
// way, and no handler runs. (TopologyPostgres on Citus is refused on the cluster:
// TestCitusTopologyChecked.) Not parallel: StrictTopology turns off the package's test setting
// that lets the other tests run Citus's statements on plain PostgreSQL.
func TestTopologyCitusRefusedOnPostgres(t *testing.T) {
	idem.StrictTopology(t)
	sch := idemtest.TestSchema(t, nil)
	cfg := &idem.Config{Schema: sch.Name, Table: sch.Table, Topology: idem.TopologyCitus}
	s, err := idem.NewStore(sch.Pool, cfg)
	if !errors.Is(err, idem.ErrTopologyMismatch) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("NewStore with TopologyCitus on plain PostgreSQL: %v; want ErrTopologyMismatch", err)
	}
	for _, want := range []string{"no Citus extension", "idem.TopologyPostgres", "TopologyDetect"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)

	var down atomic.Bool
	down.Store(true)
	pc := sch.Pool.Config().Copy()
	pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, errors.New("the database is not up yet")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	cfg.StoreTimeout = time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err = idem.NewStore(pool, cfg)
	if err != nil {
		t.Fatalf("NewStore with the database down: %v; want a Store that asks later", err)
	}
	t.Cleanup(s.Close)
	down.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runs := 0
	fn := func(context.Context, pgx.Tx) (*idem.Outcome, error) { runs++; return &idem.Outcome{Status: 201}, nil }
	for i := range 2 {
		_, err := s.Do(ctx, &idem.DoParams{Key: "k", Operation: "op", Fingerprint: "fp"}, fn)
		if !errors.Is(err, idem.ErrTopologyMismatch) || runs != 0 {
			t.Fatalf("request %d once the database answers: %v, %d runs; want ErrTopologyMismatch and no run", i+1, err, runs)
		}
	}
	if got := s.Topology(); got != idem.TopologyDetect {
		t.Errorf("Topology after the refusal = %s; want detect (nothing settled)", got)
	}
}

// The pooler refusal names the exec mode as a database URL writes it (describe_exec), and the
// fix as one too, so that what the operator searches for is what the message says.
func TestPoolerModeNamedAsInTheURL(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheStatement} {
		pc := sch.Pool.Config().Copy()
		pc.ConnConfig.DefaultQueryExecMode = mode
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		_, err = idem.NewStore(pool, &idem.Config{Schema: sch.Name, Table: sch.Table, Topology: idem.TopologyPooler})
		if !errors.Is(err, idem.ErrPoolerMode) {
			t.Fatalf("NewStore with TopologyPooler in %s: %v; want ErrPoolerMode", mode, err)
		}
		name := strings.ReplaceAll(mode.String(), " ", "_")
		if !strings.Contains(err.Error(), "default_query_exec_mode="+name+" ") || strings.Contains(err.Error(), "="+mode.String()) {
			t.Errorf("the refusal in %s does not name default_query_exec_mode=%s as a URL writes it: %v", name, name, err)
		}
		if !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
			t.Errorf("the refusal does not name the fix, default_query_exec_mode=cache_describe: %v", err)
		}
	}
}

// TopologyPooler on a connection that looks direct is not refused (a pooler may pass the server's
// process ID through), but the operator is told the Store sees no pooler.
func TestTopologyPoolerWithoutAPoolerSaysSo(t *testing.T) {
	t.Parallel()
	sch := idemtest.TestSchema(t, nil)
	pc := sch.Pool.Config().Copy()
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var mu sync.Mutex
	var logs bytes.Buffer
	s, err := idem.NewStore(pool, &idem.Config{Schema: sch.Name, Table: sch.Table, Topology: idem.TopologyPooler,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatalf("NewStore with TopologyPooler on a direct connection: %v; want it accepted", err)
	}
	t.Cleanup(s.Close)
	mu.Lock()
	defer mu.Unlock()
	if got := s.Topology(); got != idem.TopologyPooler || !strings.Contains(logs.String(), "no pooler the Store can see") {
		t.Errorf("topology %s, logs %q; want pooler, and a log that no pooler is seen", got, logs.String())
	}
}
