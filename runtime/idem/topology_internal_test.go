package idem

import (
	"errors"
	"testing"
)

// contradicts refuses plain PostgreSQL's statements on Citus (configured postgres or pooler on a
// database with the extension) and Citus's without it; it accepts the rest, a pooled connection
// under TopologyPostgres (a pooler that keeps prepared statements) and a direct one under
// TopologyPooler included.
func TestTopologyContradicts(t *testing.T) {
	citusSetOnPostgres.Store(false)
	defer citusSetOnPostgres.Store(true)
	for _, c := range []struct {
		db      dbAnswer
		kind    Topology
		refused bool
	}{
		{dbAnswer{citus: true}, TopologyPostgres, true},
		{dbAnswer{citus: true, pooled: true}, TopologyPooler, true},
		{dbAnswer{citus: true}, TopologyPooler, true},
		{dbAnswer{}, TopologyCitus, true},
		{dbAnswer{pooled: true}, TopologyCitus, true},
		{dbAnswer{citus: true}, TopologyCitus, false},
		{dbAnswer{citus: true, pooled: true}, TopologyCitus, false},
		{dbAnswer{}, TopologyPostgres, false},
		{dbAnswer{pooled: true}, TopologyPostgres, false},
		{dbAnswer{}, TopologyPooler, false},
		{dbAnswer{pooled: true}, TopologyPooler, false},
	} {
		err := c.db.contradicts(c.kind)
		if got := errors.Is(err, ErrTopologyMismatch); got != c.refused {
			t.Errorf("%s on %+v: %v; want refused=%v", c.kind, c.db, err, c.refused)
		}
	}
}
