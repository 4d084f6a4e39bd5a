//go:build citus

package idem_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Issue 39's first defect, on a real Citus cluster: the Store is created while the coordinator cannot be
// reached; once it can, a key's duplicate (sent after the first request completed) must be a
// replay, and the handler must have run once. A Store that guessed "not Citus" sends the plain
// statement set, whose claim (INSERT … SELECT … ON CONFLICT DO NOTHING) Citus tags INSERT 0 1
// even when it inserted nothing.
func TestCitusDetectedWhenTheDatabaseComesUp(t *testing.T) {
	e := newCitusEnv(t, citusURL(t), true)
	var down atomic.Bool
	down.Store(true)
	pc := e.pool.Config().Copy()
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
	cfg := *e.cfg
	cfg.StoreTimeout = 2 * time.Second
	s, err := idem.NewStore(pool, &cfg)
	if err != nil {
		t.Fatalf("NewStore with the database down: %v", err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var runs atomic.Int32
	p := &idem.DoParams{Tenant: "t1", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimLease}
	if _, err := s.Do(ctx, p, citusPay(&runs, 0)); err == nil || runs.Load() != 0 {
		t.Fatalf("Do with the database down: %v, %d runs; want an error and no run", err, runs.Load())
	}
	down.Store(false)
	for i, wantReplay := range []bool{false, true, true} {
		r, err := s.Do(ctx, p, citusPay(&runs, 0))
		if err != nil {
			t.Fatalf("request %d once the database is up: %v", i+1, err)
		}
		if r.Replayed != wantReplay {
			t.Errorf("request %d once the database is up: replayed=%v; want %v", i+1, r.Replayed, wantReplay)
		}
	}
	if n := e.count(t, "SELECT count(*) FROM payments WHERE key = 'k'"); runs.Load() != 1 || n != 1 {
		t.Errorf("the key's handler ran %d times (%d payments); want once", runs.Load(), n)
	}
}

// Issue 39's second defect, on a real Citus cluster: the plain statement set (what a Store sends when it takes
// the database for plain PostgreSQL) decides whether its claim inserted from what the insert
// returns, not from the command tag: a sequential duplicate of a completed key is a replay.
func TestCitusPlainStatementsReadReturning(t *testing.T) {
	e := newCitusEnv(t, citusURL(t), true)
	s := plainStatementsStore(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var runs atomic.Int32
	p := &idem.DoParams{Tenant: "t1", Key: "k", Operation: "op", Fingerprint: "fp", Claim: idem.ClaimLease}
	for i, wantReplay := range []bool{false, true, true} {
		r, err := s.Do(ctx, p, citusPay(&runs, 0))
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		if r.Replayed != wantReplay {
			t.Errorf("request %d: replayed=%v; want %v", i+1, r.Replayed, wantReplay)
		}
	}
	if n := e.count(t, "SELECT count(*) FROM payments WHERE key = 'k'"); runs.Load() != 1 || n != 1 {
		t.Errorf("the key's handler ran %d times (%d payments); want once", runs.Load(), n)
	}
}

// KeyStats (refused on Citus before), on a real Citus cluster: KeyStats over the distributed key table answers.
func TestCitusKeyStats(t *testing.T) {
	e := newCitusEnv(t, citusURL(t), true)
	s := e.store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range []string{"a", "b"} {
		p := &idem.DoParams{Tenant: "t-" + k, Key: k, Operation: "op", Fingerprint: "fp"}
		if _, err := s.Do(ctx, p, citusPay(nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := s.KeyStats(ctx)
	if err != nil {
		t.Fatalf("KeyStats on Citus: %v", err)
	}
	t.Logf("KeyStats: %+v", st)
}

// plainStatementsStore is a Store told the database is plain PostgreSQL (Config.Topology) on a
// Citus coordinator, which NewStore refuses but for a test (PlainStatementsOnCitus): it sends the
// plain statement set.
func plainStatementsStore(t *testing.T, e *citusEnv) *idem.Store {
	idem.PlainStatementsOnCitus(t)
	cfg := *e.cfg
	cfg.Topology = idem.TopologyPostgres
	s, err := idem.NewStore(e.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A configured topology is checked against the cluster: plain PostgreSQL's statements
// (TopologyPostgres, TopologyPooler, and the deprecated Pooler: PoolerNone) on a Citus
// coordinator are refused at NewStore with ErrTopologyMismatch and the fix, instead of answering
// duplicates with 500 "division by zero" (lease mode) or a reused key with 0A000 (transaction
// mode); TopologyCitus and detection settle on Citus.
func TestCitusTopologyChecked(t *testing.T) {
	e := newCitusEnv(t, citusURL(t), true)
	for _, c := range []idem.Config{{Topology: idem.TopologyPostgres}, {Topology: idem.TopologyPooler}, {Pooler: idem.PoolerNone}} {
		cfg := *e.cfg
		cfg.Topology, cfg.Pooler = c.Topology, c.Pooler
		s, err := idem.NewStore(e.pool, &cfg)
		if err == nil {
			s.Close()
		}
		t.Logf("Topology %s, Pooler %s on Citus: %v", c.Topology, c.Pooler, err)
		if !errors.Is(err, idem.ErrTopologyMismatch) || !strings.Contains(err.Error(), "idem.TopologyCitus") {
			t.Errorf("NewStore with Topology %s, Pooler %s on a Citus coordinator: %v; want ErrTopologyMismatch naming idem.TopologyCitus",
				c.Topology, c.Pooler, err)
		}
	}
	for _, topo := range []idem.Topology{idem.TopologyCitus, idem.TopologyDetect} {
		cfg := *e.cfg
		cfg.Topology = topo
		s, err := idem.NewStore(e.pool, &cfg)
		if err != nil {
			t.Fatalf("NewStore with Topology %s on Citus: %v", topo, err)
		}
		if got := s.Topology(); got != idem.TopologyCitus {
			t.Errorf("Topology %s on Citus settled on %s; want citus", topo, got)
		}
		s.Close()
	}
}
