package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

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
	//
	// A configured topology is asked the same question and checked against the answer: NewStore
	// refuses, with [ErrTopologyMismatch] and the reason, plain PostgreSQL's statements
	// (TopologyPostgres, TopologyPooler) on a database with the Citus extension, and Citus's on one
	// without it.
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
	// advisory lock (they are per node). NewStore refuses it on a database without the Citus
	// extension (ErrTopologyMismatch). Behind a transaction-mode pooler in front of Citus, leave
	// the topology to detection, which finds both.
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
var errTopologyUnknown = errors.New("the Store does not know yet whether the database is plain PostgreSQL, behind a transaction-mode pooler, or Citus, and will not guess")

// detector asks the database for the Store's topology, one request at a time.
type detector struct{ mu sync.Mutex }

// settleTopology sets s's topology from its configuration and the database's answer. It returns
// the topology, or ErrStoreUnavailable when the database could not be asked (the next call asks
// again), or ErrTopologyMismatch when the configured topology is not the database's, or
// ErrPoolerMode when pgx's exec mode cannot work through the pooler it found or was told of.
func (s *Store) settleTopology(ctx context.Context) (*topology, error) {
	if t := s.topo.Load(); t != nil {
		return t, nil
	}
	s.detect.mu.Lock()
	defer s.detect.mu.Unlock()
	if t := s.topo.Load(); t != nil {
		return t, nil
	}
	db, mode, err := s.ask(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %w", ErrStoreUnavailable, errTopologyUnknown, err)
	}
	kind, how := configured(&s.cfg), "configured"
	var t *topology
	if kind == TopologyDetect {
		t, how = db.topology(), "detected"
	} else {
		if err := db.contradicts(kind); err != nil {
			return nil, err
		}
		t = newTopology(kind, false)
	}
	if err := refuse(t, mode, "it was "+how); err != nil {
		return nil, err
	}
	_, pool := s.db.(acquirer)
	s.topo.Store(t.chooseClaimers(pool))
	s.logTopology(t, db, mode, how)
	return t, nil
}

// logTopology tells the operator what is worth a notice about the settled topology t: a detected
// one other than plain PostgreSQL, and a configured pooler the Store cannot see.
func (s *Store) logTopology(t *topology, db dbAnswer, mode pgx.QueryExecMode, how string) {
	switch {
	case how == "detected" && t.kind != TopologyPostgres:
		msg := "idem: detected the database's topology"
		if t.pooled && s.ln != nil && !s.ln.direct {
			msg += "; connections go through a pooler, and waiting duplicates may not hear notifications through it: LISTEN needs a session " +
				"(set Config.ListenConn to a direct connection; docs/deploy.md)"
		}
		s.log.Info(msg, "topology", t.kind.String(), "pooled", t.pooled, "exec_mode", execModeName(mode))
	case how == "configured" && t.kind == TopologyPooler && !db.pooled:
		// Not refused: a pooler that hands its clients the server's own process ID looks direct,
		// and naming it is what Config.Topology is for.
		s.log.Info("idem: Config.Topology is TopologyPooler, and the connection asked is the server's own (its process ID is the one "+
			"it was told at connect time): no pooler the Store can see; if the application connects directly, TopologyPostgres "+
			"prepares the Store's statements once per connection and saves a parse on every request", "exec_mode", execModeName(mode))
	}
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

// dbAnswer is what the database says of itself: whether the Citus extension is installed in it,
// and whether the connection asked goes through a pooler.
type dbAnswer struct{ citus, pooled bool }

// topology is the topology the answer names.
func (a dbAnswer) topology() *topology {
	switch {
	case a.citus:
		return newTopology(TopologyCitus, a.pooled)
	case a.pooled:
		return newTopology(TopologyPooler, true)
	}
	return newTopology(TopologyPostgres, false)
}

// ErrTopologyMismatch is wrapped by NewStore's refusal (or, when the database could not be asked
// at NewStore, every claim's until it can) of a Config.Topology the database contradicts: plain
// PostgreSQL's statements on a Citus coordinator (TopologyPostgres, TopologyPooler), or Citus's
// on a database without the extension (TopologyCitus). The message says which, and the fix.
var ErrTopologyMismatch = errors.New("idem: Config.Topology does not match the database")

// citusSetOnPostgres lets TopologyCitus run on a database without Citus. Only the tests set it:
// they run Citus's statement set on plain PostgreSQL, so that every path it takes is tested
// without a cluster.
var citusSetOnPostgres atomic.Bool

// plainSetOnCitus lets TopologyPostgres run on Citus. Only a test sets it, to show what plain
// PostgreSQL's statements do on a cluster (a Store that took Citus for plain PostgreSQL).
var plainSetOnCitus atomic.Bool

// contradicts says why the configured topology kind cannot run on the database a describes, or
// nil when it can. A configured TopologyPostgres on a pooled connection is not refused (it is
// the setting for a pooler that keeps prepared statements), nor TopologyPooler on one that looks
// direct (see logTopology).
func (a dbAnswer) contradicts(kind Topology) error {
	switch {
	case a.citus && kind != TopologyCitus && !plainSetOnCitus.Load():
		// Plain PostgreSQL's statements fail on purpose to skip the rest of a batch and lock keys
		// with advisory locks: on Citus the first costs the coordinator its worker connections and
		// surfaces as errors ("division by zero"), and the second locks nothing across nodes.
		return fmt.Errorf("%w: it is %s (%s), and the database has the Citus extension: plain PostgreSQL's statements fail on Citus "+
			"(guards that fail on purpose reach the client as errors; advisory locks are per node); set Config.Topology to "+
			"idem.TopologyCitus, or leave it unset (TopologyDetect) so that the Store asks (docs/citus.md)", ErrTopologyMismatch, kind, topologyGoName[kind])
	case !a.citus && kind == TopologyCitus && !citusSetOnPostgres.Load():
		return fmt.Errorf("%w: it is citus (idem.TopologyCitus), and the database has no Citus extension "+
			"(no row for citus in pg_extension): the application reaches plain PostgreSQL, or a Citus coordinator's database where "+
			"CREATE EXTENSION citus was not run, so the key table is not distributed; connect to the coordinator's database that "+
			"has the extension, or set Config.Topology to idem.TopologyPostgres, or leave it unset (TopologyDetect) so that the Store asks", ErrTopologyMismatch)
	}
	return nil
}

var topologyGoName = map[Topology]string{TopologyPostgres: "idem.TopologyPostgres", TopologyPooler: "idem.TopologyPooler", TopologyCitus: "idem.TopologyCitus"}

// ask asks the database what it is (one short transaction): the configured topology is checked
// against its answer, and TopologyDetect takes it. mode is the exec mode of the connection asked.
func (s *Store) ask(ctx context.Context) (a dbAnswer, mode pgx.QueryExecMode, err error) {
	mode = -1
	if cc := poolConnConfig(s.db); cc != nil {
		mode = cc.DefaultQueryExecMode
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return a, mode, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var pid uint32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid(), EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')",
		pgx.QueryExecModeSimpleProtocol).Scan(&pid, &a.citus); err != nil {
		return a, mode, err
	}
	conn := tx.Conn()
	mode = conn.Config().DefaultQueryExecMode
	// A pooler hands its clients made-up process IDs: a server process that is not the one named
	// at connect time is another client's connection, lent for this transaction.
	a.pooled = pid != conn.PgConn().PID()
	return a, mode, nil
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
		"idem.Config.Topology to idem.TopologyPostgres", ErrPoolerMode, t.kind, why, execModeName(mode), refusedBecause[mode])
}

var refusedBecause = map[pgx.QueryExecMode]string{
	pgx.QueryExecModeCacheStatement: "pgx's statement cache (its default) prepares statements by name, which such a pooler does not keep",
	pgx.QueryExecModeDescribeExec: "it describes a statement in one round trip and runs it in the next, and between the two the pooler " +
		"may lend the server connection to another client, so one client's statement runs as another's",
}

// execModeName is mode as a database URL writes it (default_query_exec_mode=describe_exec),
// which is what a reader of the refusal searches for and types; pgx's String has spaces.
func execModeName(mode pgx.QueryExecMode) string {
	if mode < 0 {
		return "unknown"
	}
	return strings.ReplaceAll(mode.String(), " ", "_")
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
