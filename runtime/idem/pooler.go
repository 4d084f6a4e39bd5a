package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler says whether a connection pooler that shares server connections between transactions
// stands between the Store and PostgreSQL: pgbouncer in transaction or statement mode, and most
// poolers in front of managed databases. Such a pooler keeps nothing of a session from one
// transaction to the next: no statement prepared by name, no LISTEN. docs/deploy.md has the
// table of pooler modes and pgx's exec modes.
type Pooler int

const (
	// PoolerDetect, the zero value: NewStore asks the database. A connection whose server process
	// is not the one it was told at connect time counts as pooled (pgbouncer, like most poolers,
	// hands its clients made-up process IDs).
	PoolerDetect Pooler = iota
	// PoolerNone: no pooler, or one that keeps what the Store needs of a session: pgbouncer in
	// session mode (one server connection per client connection), or a pooler that carries named
	// prepared statements across its server connections (pgbouncer 1.21 and later with
	// max_prepared_statements). The Store checks nothing and prepares its batched statements by
	// name, as on a direct connection.
	PoolerNone
	// PoolerTransaction: a pooler that gives each transaction any server connection. The Store
	// prepares nothing by name, and NewStore refuses pgx's statement cache.
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

// What the Store knows of the path to the database (Store.path).
const (
	pathUnknown int32 = iota // not checked yet: the database could not be reached at NewStore
	pathDirect               // prepare the batched statements by name on each connection
	pathPooled               // prepare nothing by name
)

// ErrPoolerMode is wrapped by NewStore's refusal of a pgx exec mode that cannot work through
// the pooler in front of the database.
var ErrPoolerMode = errors.New("idem: the pool's query exec mode cannot work through the connection pooler")

// checkPath settles s.path from Config.Pooler, asking the database when it must. An error is a
// refusal (ErrPoolerMode); a database that cannot be reached leaves the question to the first
// request (s.checkConn), since an application may start before its database does.
func (s *Store) checkPath(ctx context.Context) error {
	switch s.cfg.Pooler {
	case PoolerNone:
		s.path.Store(pathDirect)
		return nil
	case PoolerTransaction:
		s.path.Store(pathPooled)
		if cc := poolConnConfig(s.db); cc != nil {
			return s.refuse(cc.DefaultQueryExecMode, "Config.Pooler is PoolerTransaction")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	tx, err := s.db.Begin(ctx)
	if err != nil {
		s.log.Debug("idem: could not ask the database whether a pooler is in front of it; the first request asks", "error", err)
		return nil
	}
	defer tx.Rollback(ctx)
	return s.checkConn(ctx, tx.Conn())
}

// checkConn finds out, on conn, whether a pooler stands between the Store and the database,
// when that is not known yet, and refuses an exec mode that cannot work through it.
func (s *Store) checkConn(ctx context.Context, conn *pgx.Conn) error {
	if s.path.Load() != pathUnknown {
		return nil
	}
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return err
	}
	if pid == conn.PgConn().PID() {
		s.path.CompareAndSwap(pathUnknown, pathDirect)
		return nil
	}
	if err := s.refuse(conn.Config().DefaultQueryExecMode, "its server process is not the one named at connect time"); err != nil {
		return err
	}
	if s.path.CompareAndSwap(pathUnknown, pathPooled) {
		msg := "idem: the database connections go through a pooler; the Store prepares nothing by name on them"
		if s.ln != nil && !s.ln.direct {
			msg += ", and waiting duplicates may not hear notifications through it: LISTEN needs a session " +
				"(set Config.ListenConn to a direct connection; docs/deploy.md)"
		}
		s.log.Info(msg, "exec_mode", conn.Config().DefaultQueryExecMode.String())
	}
	return nil
}

// refuse answers an exec mode that prepares statements by name on connections a transaction
// pooler shares: pgx's statement cache (its default) fails there with 42P05 "prepared statement
// already exists" or 26000 "prepared statement does not exist", on some requests, not all.
func (s *Store) refuse(mode pgx.QueryExecMode, why string) error {
	if mode != pgx.QueryExecModeCacheStatement {
		return nil
	}
	return fmt.Errorf("%w: the connections go through a pooler (%s), and pgx's statement cache "+
		"(default_query_exec_mode=cache_statement, pgx's default) prepares statements by name, which a pooler in "+
		"transaction mode does not keep; add default_query_exec_mode=cache_describe (or exec, describe_exec, "+
		"simple_protocol) to the database URL, or set pgxpool.Config.ConnConfig.DefaultQueryExecMode; if the pooler "+
		"does keep prepared statements (session mode, or pgbouncer 1.21+ with max_prepared_statements), set "+
		"idem.Config.Pooler to idem.PoolerNone", ErrPoolerMode, why)
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
