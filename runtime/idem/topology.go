package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Topology is what the Store's statements reach: plain PostgreSQL, PostgreSQL behind a pooler
// that shares server connections between transactions, or a Citus cluster. It decides which
// statements a claim sends and whether the Store prepares them by name; docs/deploy.md and
// docs/citus.md have the details.
type Topology int

const (
	// TopologyDetect, the zero value: the Store asks the database (is the Citus extension
	// installed? is a connection's server process the one it was told at connect time?). When the
	// database cannot be asked at NewStore (an application that starts before its database), the
	// first request asks again, and until an answer comes every claim is refused with
	// [ErrStoreUnavailable]: the Store never guesses, since the wrong statement set can run a
	// handler twice (on Citus) or fail on every request (behind a pooler).
	TopologyDetect Topology = iota
	// TopologyPostgres: plain PostgreSQL, reached directly or through a pooler that keeps what
	// the Store needs of a session (pgbouncer in session mode, or pgbouncer 1.21+ with
	// max_prepared_statements). The Store prepares its batched statements by name.
	TopologyPostgres
	// TopologyPooler: plain PostgreSQL behind a pooler that gives each transaction any server
	// connection (pgbouncer in transaction mode). The Store prepares nothing by name, and NewStore
	// refuses the pgx exec modes that cannot work there (see [ErrPoolerMode]).
	TopologyPooler
	// TopologyCitus: a Citus coordinator, reached directly. The Store sends Citus's statement set:
	// no statement that fails on purpose (Citus drops the worker connection it failed on) and no
	// advisory lock (they are per node). It works on plain PostgreSQL too, more slowly: the tests
	// run it there. Behind a transaction-mode pooler in front of Citus, leave the topology to
	// detection, which finds both.
	TopologyCitus
)

func (t Topology) String() string {
	switch t {
	case TopologyDetect:
		return "detect"
	case TopologyPostgres:
		return "postgres"
	case TopologyPooler:
		return "pooler"
	case TopologyCitus:
		return "citus"
	}
	return fmt.Sprintf("Topology(%d)", int(t))
}

// Pooler is the older form of [Config.Topology].
//
// Deprecated: set Config.Topology: PoolerNone is TopologyPostgres, PoolerTransaction is
// TopologyPooler. A Topology other than TopologyDetect wins over Pooler.
type Pooler int

const (
	// PoolerDetect: as TopologyDetect.
	PoolerDetect Pooler = iota
	// PoolerNone: as TopologyPostgres.
	PoolerNone
	// PoolerTransaction: as TopologyPooler.
	PoolerTransaction
)

func (p Pooler) String() string {
	switch p {
	case PoolerDetect:
		return "detect"
	case PoolerNone:
		return "none"
	case PoolerTransaction:
		return "transaction"
	}
	return fmt.Sprintf("Pooler(%d)", int(p))
}

// configured is the topology cfg names, TopologyDetect when it names none.
func configured(cfg *Config) Topology {
	if cfg.Topology != TopologyDetect {
		return cfg.Topology
	}
	switch cfg.Pooler {
	case PoolerNone:
		return TopologyPostgres
	case PoolerTransaction:
		return TopologyPooler
	}
	return TopologyDetect
}

// Why Citus has a statement set of its own: Citus closes the coordinator's connection to a worker
// on which a statement failed (it raises the worker's error before the connection is idle again),
// so the next statement routed there waits for a new connection: tens of milliseconds. The
// request path's guards fail on purpose to skip the rest of a batch (a replay, a key someone
// holds), and on the key's shard they would cost that on every replay and every duplicate. So
// with Citus's statement set the Store sends no guard: the statements they would skip run (the
// claim's insert writes nothing for a key that has a row, the business BEGIN is rolled back),
// and the answers decide the same. Advisory locks are per node, so a transaction-mode claim
// locks the key's row instead. docs/citus.md has the profile.

// topology is the Store's settled topology: what it is, and what follows from it. Set once
// (Store.topo), never changed.
type topology struct {
	kind Topology
	// set is the topology's statement set (stmtset.go): Citus's has no guard.
	set stmtSet
	// pooled: connections go through a pooler that shares server connections between
	// transactions, so nothing is prepared by name (a Citus coordinator may sit behind one).
	pooled bool
	// lease and tx are the claim paths of the two claim modes (claimpath.go).
	lease, tx claimer
}

func newTopology(kind Topology, pooled bool) *topology {
	t := &topology{kind: kind, pooled: pooled || kind == TopologyPooler, set: plainSet{}}
	if kind == TopologyCitus {
		t.set = citusSet{}
	}
	return t
}

// ErrPoolerMode is wrapped by NewStore's refusal of a pgx exec mode that cannot work through
// the pooler in front of the database.
var ErrPoolerMode = errors.New("idem: the pool's query exec mode cannot work through the connection pooler")

// errTopologyUnknown is why a claim is refused before the Store knows its topology.
var errTopologyUnknown = errors.New("the Store does not know yet whether the database is plain PostgreSQL, behind a transaction-mode pooler, or Citus, and will not guess (set Config.Topology to skip the question)")

// detector asks the database for the Store's topology, one request at a time.
type detector struct{ mu sync.Mutex }

// settleTopology sets s's topology from its configuration, asking the database when it must. It returns
// the topology, or ErrStoreUnavailable when the database could not be asked (the next call asks
// again), or ErrPoolerMode when pgx's exec mode cannot work through the pooler it found.
func (s *Store) settleTopology(ctx context.Context) (*topology, error) {
	if t := s.topo.Load(); t != nil {
		return t, nil
	}
	s.detect.mu.Lock()
	defer s.detect.mu.Unlock()
	if t := s.topo.Load(); t != nil {
		return t, nil
	}
	t, mode, err := s.ask(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrStoreUnavailable, errTopologyUnknown, err)
	}
	if err := refuse(t, mode, "it was "+map[bool]string{true: "detected", false: "configured"}[configured(&s.cfg) == TopologyDetect]); err != nil {
		return nil, err
	}
	_, pool := s.db.(acquirer)
	s.topo.Store(t.chooseClaimers(pool))
	if configured(&s.cfg) == TopologyDetect && t.kind != TopologyPostgres { // worth an operator's notice
		msg := "idem: detected the database's topology"
		if t.pooled && s.ln != nil && !s.ln.direct {
			msg += "; connections go through a pooler, and waiting duplicates may not hear notifications through it: LISTEN needs a session " +
				"(set Config.ListenConn to a direct connection; docs/deploy.md)"
		}
		s.log.Info(msg, "topology", t.kind.String(), "pooled", t.pooled, "exec_mode", mode.String())
	}
	return t, nil
}

// topology is s's settled topology, settling it first when it is not (see settleTopology).
func (s *Store) topology(ctx context.Context) (*topology, error) {
	if t := s.topo.Load(); t != nil {
		return t, nil
	}
	var t *topology
	err := s.bounded(ctx, 0, func(ctx context.Context) (err error) {
		t, err = s.settleTopology(ctx)
		return err
	})
	return t, err
}

// ask works out the topology: the configured one, or the database's answer (one short
// transaction). mode is the exec mode of the connection asked, or of the pool's configuration.
func (s *Store) ask(ctx context.Context) (t *topology, mode pgx.QueryExecMode, err error) {
	mode = -1
	if cc := poolConnConfig(s.db); cc != nil {
		mode = cc.DefaultQueryExecMode
	}
	if kind := configured(&s.cfg); kind != TopologyDetect {
		return newTopology(kind, false), mode, nil
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, mode, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var pid uint32
	var citus bool
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid(), EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')",
		pgx.QueryExecModeSimpleProtocol).Scan(&pid, &citus); err != nil {
		return nil, mode, err
	}
	conn := tx.Conn()
	mode = conn.Config().DefaultQueryExecMode
	// A pooler hands its clients made-up process IDs: a server process that is not the one named
	// at connect time is another client's connection, lent for this transaction.
	pooled := pid != conn.PgConn().PID()
	switch {
	case citus:
		return newTopology(TopologyCitus, pooled), mode, nil
	case pooled:
		return newTopology(TopologyPooler, true), mode, nil
	}
	return newTopology(TopologyPostgres, false), mode, nil
}

// refuse answers an exec mode that cannot work on connections a transaction pooler shares: pgx's
// statement cache (its default) prepares statements by name, which fails there with 42P05
// "prepared statement already exists" or 26000 "prepared statement does not exist", on some
// requests, not all; describe_exec prepares the unnamed statement in one round trip and runs it in
// the next, and between the two the pooler may hand the server connection to another client,
// whose statement then runs with these parameters, or these with its own
// (TestPgbouncerDescribeExecStorm shows it). mode -1 means unknown (not a pool).
func refuse(t *topology, mode pgx.QueryExecMode, why string) error {
	if !t.pooled || (mode != pgx.QueryExecModeCacheStatement && mode != pgx.QueryExecModeDescribeExec) {
		return nil
	}
	return fmt.Errorf("%w: the connections go through a pooler that shares server connections between transactions "+
		"(topology %s: %s), and default_query_exec_mode=%s cannot work there: %s; add default_query_exec_mode=cache_describe "+
		"(or exec, or simple_protocol) to the database URL, or set pgxpool.Config.ConnConfig.DefaultQueryExecMode; if the pooler "+
		"does keep prepared statements (session mode, or pgbouncer 1.21+ with max_prepared_statements), set "+
		"idem.Config.Topology to idem.TopologyPostgres", ErrPoolerMode, t.kind, why, mode, refusedBecause[mode])
}

var refusedBecause = map[pgx.QueryExecMode]string{
	pgx.QueryExecModeCacheStatement: "pgx's statement cache (its default) prepares statements by name, which such a pooler does not keep",
	pgx.QueryExecModeDescribeExec: "it describes a statement in one round trip and runs it in the next, and between the two the pooler " +
		"may lend the server connection to another client, so one client's statement runs as another's",
}

// poolConnConfig is the connection configuration of db's pool, or nil when db is not a pool.
func poolConnConfig(db DB) *pgx.ConnConfig {
	p, ok := db.(interface{ Config() *pgxpool.Config })
	if !ok {
		return nil
	}
	if pc := p.Config(); pc != nil {
		return pc.ConnConfig
	}
	return nil
}

// Topology returns the Store's topology: the configured one, or what detection found;
// TopologyDetect while the database has not answered (claims are then refused with
// ErrStoreUnavailable).
func (s *Store) Topology() Topology {
	if t := s.topo.Load(); t != nil {
		return t.kind
	}
	return TopologyDetect
}

// set is the statement set of s's topology (stmtset.go). Only the claim paths and what follows
// a claim ask, after the topology has settled (Store.topology): a claim is refused before.
func (s *Store) set() stmtSet { return s.topo.Load().set }
