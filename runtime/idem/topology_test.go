package idem_test

import (
	"context"
	"errors"
	"net"
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
