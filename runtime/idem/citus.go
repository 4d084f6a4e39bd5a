package idem

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Citus closes the coordinator's connection to a worker on which a statement failed (it raises
// the worker's error before the connection is idle again), so the next statement routed there
// waits for a new connection: tens of milliseconds. The request path's guards fail on purpose
// to skip the rest of a batch (a replay, a key someone holds), and on the key's shard they
// would cost that on every replay and every duplicate. So on a database with Citus the Store
// sends no guard: the statements they would skip run (the claim's insert writes nothing for a
// key that has a row, the business BEGIN is rolled back), and the answers decide the same.
// docs/citus.md has the profile.

// detectCitus sets s.citus when the database has the Citus extension. A database that cannot be
// reached leaves the guards on: they are correct on Citus too, only slower there.
func (s *Store) detectCitus(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	defer cancel()
	if err := s.db.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')", pgx.QueryExecModeSimpleProtocol).Scan(&s.citus); err != nil {
		s.log.Debug("idem: could not ask the database whether it is Citus; the Store sends its guards", "error", err)
	}
}
