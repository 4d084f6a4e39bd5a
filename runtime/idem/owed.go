package idem

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A claim's batch begins the business transaction in the same round trip as the claim, before
// it knows whether the key is new: for a replay, a mismatch or an in-progress answer that
// transaction was begun for nothing, and must end before its connection goes back to the pool.
// A ROLLBACK of its own would cost the request a round trip, and a statement that fails on
// purpose to skip the BEGIN costs the server more and writes a line to its log (see
// sql/claim_lock.sql). So the Store keeps such a connection for a moment, its transaction still
// open, and the next batch it sends on it begins with the ROLLBACK: the next claim's round trip
// carries it.
//
// What such a transaction holds is nothing anybody waits for: a replay's business transaction
// has run no statement (lease mode), or holds the advisory lock of a key whose completed row is
// final, which other replays read past (transaction mode); at read committed neither keeps a
// snapshot. It is kept owedMaxAge at most (the sweeper rolls it back then), and the Store keeps
// half of the pool's connections at most, so the pool's other users never wait long.

// owedMaxAge is how long a connection whose rollback is owed waits for the Store's next batch
// before the sweeper rolls it back on its own.
const owedMaxAge = 20 * time.Millisecond

// owedConns are the connections whose rollback the Store owes, most recent last.
type owedConns struct {
	mu        sync.Mutex
	conns     []owedConn
	max       int
	scheduled bool // a settle is due on the sweeper
	closed    bool
}

type owedConn struct {
	conn  *pgxpool.Conn
	since time.Time
}

// newOwedConns keeps up to half of db's pool (at least one) when db is a pool.
func newOwedConns(db DB) *owedConns {
	o := &owedConns{}
	if p, ok := db.(interface{ Config() *pgxpool.Config }); ok {
		if pc := p.Config(); pc != nil {
			o.max = max(int(pc.MaxConns)/2, 1)
		}
	}
	return o
}

// owe ends bt, whose business transaction was begun for nothing and has run nothing that must
// be undone at once: its connection is kept, the transaction open, for the next batch to roll
// back (owedConns), or, when that cannot be, rolled back now.
func (s *Store) owe(ctx context.Context, bt *bizTx) {
	// On Citus the transaction may hold a connection to a worker (the replay check ran there):
	// it is rolled back at once, as docs/citus.md says.
	if s.citus || bt.conn == nil || bt.conn.Conn().PgConn().TxStatus() != 'T' || !s.owed.push(s, bt.conn) {
		s.rollback(ctx, bt)
		return
	}
	bt.conn = nil
}

func (o *owedConns) push(s *Store, conn *pgxpool.Conn) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || len(o.conns) >= o.max {
		return false
	}
	o.conns = append(o.conns, owedConn{conn: conn, since: time.Now()})
	if !o.scheduled {
		o.scheduled = true
		afterBound(owedMaxAge, s.settleOwed)
	}
	return true
}

// pop takes the most recent owed connection, or nil.
func (o *owedConns) pop() *pgxpool.Conn {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.conns)
	if n == 0 {
		return nil
	}
	c := o.conns[n-1].conn
	o.conns[n-1] = owedConn{}
	o.conns = o.conns[:n-1]
	return c
}

// settleOwed rolls back the owed connections that waited owedMaxAge (all of them once the Store
// is closed) and gives them back to the pool; it runs on the sweeper, and again while any are
// left.
func (s *Store) settleOwed() {
	o := s.owed
	o.mu.Lock()
	cutoff := time.Now().Add(-owedMaxAge)
	var due []*pgxpool.Conn
	kept := o.conns[:0]
	for _, c := range o.conns {
		if o.closed || !c.since.After(cutoff) {
			due = append(due, c.conn)
		} else {
			kept = append(kept, c)
		}
	}
	clear(o.conns[len(kept):])
	o.conns = kept
	o.scheduled = len(kept) > 0
	if o.scheduled {
		afterBound(owedMaxAge, s.settleOwed)
	}
	o.mu.Unlock()
	for _, conn := range due {
		ctx, cancel := withBound(context.Background(), cleanupTimeout)
		_, _ = conn.Exec(ctx, rollbackSQL) // a failed rollback closes the connection: the pool drops it
		cancel()
		conn.Release()
	}
}

// closeOwed rolls back every owed connection now, and owes none from now on.
func (s *Store) closeOwed() {
	s.owed.mu.Lock()
	s.owed.closed = true
	s.owed.mu.Unlock()
	s.settleOwed()
}
