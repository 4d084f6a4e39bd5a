package idem

import "testing"

// The tests run Citus's statement set on plain PostgreSQL (Config.Topology: TopologyCitus), so
// that every path it takes is tested without a cluster; NewStore refuses that to an application.
func init() { citusSetOnPostgres.Store(true) }

// StrictTopology makes NewStore refuse TopologyCitus on plain PostgreSQL, as it does for an
// application, until t ends. The setting is the package's: only a test that does not run in
// parallel may call it (parallel tests start after every sequential one has ended).
func StrictTopology(t testing.TB) {
	citusSetOnPostgres.Store(false)
	t.Cleanup(func() { citusSetOnPostgres.Store(true) })
}

// PlainStatementsOnCitus lets NewStore send plain PostgreSQL's statements to a Citus coordinator
// (Config.Topology: TopologyPostgres) until t ends, which it refuses to an application. Not for
// parallel tests (see StrictTopology).
func PlainStatementsOnCitus(t testing.TB) {
	plainSetOnCitus.Store(true)
	t.Cleanup(func() { plainSetOnCitus.Store(false) })
}
