package idem

import (
	"context"
	"sync"
	"sync/atomic"
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
// What such a transaction holds: nothing in lease mode (it ran no statement); in transaction
// mode the advisory lock of the key it replayed, whose completed row other replays read past, and
// which only a new claim of that key, once the row has expired, waits for. At read committed
// neither keeps a snapshot. The oldest is reused first, each is rolled back by the sweeper
// within owedMaxAge when no batch took it, and a pool keeps at most half
// of its connections owed, across all the Stores on it, and more (up to all but one) only while
// it still has an idle connection to give its other users, so they never wait long. (With half
// alone, 11–17% of replays under a 16-client load on a pool of 16 found the half taken and paid a
// ROLLBACK round trip of their own; with the idle rule, 2–3%.) A
// pool with fewer than 4 connections, or with hooks that prepare or reset a connection's session
// per acquisition (PrepareConn, BeforeAcquire, AfterRelease), owes none: an owed connection
// passes from one request to the next without the pool's acquire and release.

// owedMaxAge is how long a connection whose rollback is owed waits for the Store's next batch
// before the sweeper rolls it back on its own. Store.owedAge is it,
// but in the tests that count round trips, which must not see the sweeper's ROLLBACK.
const owedMaxAge = 20 * time.Millisecond

// poolOwed counts, per pool, the connections all its Stores keep owed.
var poolOwed sync.Map // *pgxpool.Pool → *atomic.Int32

// owedConns are the connections whose rollback the Store owes, oldest first.
type owedConns struct {
	mu        sync.Mutex
	conns     []owedConn
	max       int32         // for the whole pool; 0: owe none
	spare     int32         // more the pool may keep while it has an idle connection
	pool      *pgxpool.Pool // whose idle connections push looks at beyond max
	shared    *atomic.Int32 // how many the pool's Stores keep
	scheduled bool          // a settle is due on the sweeper
	closed    bool
	settling  int        // settles rolling connections back
	settled   *sync.Cond // on mu: settling went down
}

type owedConn struct {
	conn  *pgxpool.Conn
	since time.Time
}

func newOwedConns(db DB) *owedConns {
	o := &owedConns{}
	o.settled = sync.NewCond(&o.mu)
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return o
	}
	pc := pool.Config()
	if pc.MaxConns < 4 || pc.PrepareConn != nil || pc.BeforeAcquire != nil || pc.AfterRelease != nil {
		return o
	}
	shared, _ := poolOwed.LoadOrStore(pool, new(atomic.Int32))
	o.max, o.shared = pc.MaxConns/2, shared.(*atomic.Int32)
	o.spare, o.pool = pc.MaxConns-1-o.max, pool
	return o
}

// owe ends bt, whose business transaction was begun for nothing and has run nothing that must
// be undone at once: its connection is kept, the transaction open, for the next batch to roll
// back (owedConns), or, when that cannot be, rolled back now.
func (s *Store) owe(ctx context.Context, bt *bizTx) {
	// On Citus the transaction may hold a connection to a worker: it is rolled back at once
	// (stmtSet.keepsOwed).
	if !s.set().keepsOwed() || bt.conn == nil || bt.conn.Conn().PgConn().TxStatus() != 'T' || !s.owed.push(s, bt.conn) {
		s.rollback(ctx, bt)
		return
	}
	bt.conn = nil
}

func (o *owedConns) push(s *Store, conn *pgxpool.Conn) bool {
	if o.max == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	if n := o.shared.Add(1); n > o.max && (n > o.max+o.spare || o.pool.Stat().IdleConns() == 0) {
		o.shared.Add(-1)
		return false
	}
	o.conns = append(o.conns, owedConn{conn: conn, since: time.Now()})
	if !o.scheduled {
		o.scheduled = true
		afterBound(s.owedAge, s.settleDue)
	}
	return true
}

// pop takes the oldest owed connection, or nil.
func (o *owedConns) pop() *pgxpool.Conn {
	if o.max == 0 {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.conns) == 0 {
		return nil
	}
	c := o.conns[0].conn
	n := copy(o.conns, o.conns[1:])
	o.conns[n] = owedConn{}
	o.conns = o.conns[:n]
	o.shared.Add(-1)
	return c
}

// settleDue is settleOwed of the connections that waited owedAge; it runs on the sweeper, and is
// due again when the oldest of those left will have waited as long.
func (s *Store) settleDue() { s.settleOwed(false) }

// settleOwed rolls back the owed connections that waited owedAge (all of them when all is set or
// the Store is closed) and gives them back to the pool.
func (s *Store) settleOwed(all bool) {
	o := s.owed
	o.mu.Lock()
	cutoff := time.Now().Add(-s.owedAge)
	n := 0
	for n < len(o.conns) && (all || o.closed || !o.conns[n].since.After(cutoff)) {
		n++
	}
	due := make([]*pgxpool.Conn, n)
	for i := range n {
		due[i] = o.conns[i].conn
	}
	left := copy(o.conns, o.conns[n:])
	clear(o.conns[left:])
	o.conns = o.conns[:left]
	if o.shared != nil {
		o.shared.Add(int32(-n))
	}
	o.scheduled = left > 0
	if o.scheduled {
		afterBound(max(time.Until(o.conns[0].since.Add(s.owedAge)), time.Millisecond), s.settleDue)
	}
	o.settling++
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.settling--
		o.settled.Broadcast()
		o.mu.Unlock()
	}()
	for _, conn := range due {
		endConn(context.Background(), conn)
	}
}

// endConn gives conn back to the pool, the transaction it has open, if any, rolled back first
// (bounded by cleanupTimeout). A failed rollback closes the connection, and the pool drops it.
func endConn(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
		cctx, bound := detached(ctx)
		_, _ = conn.Exec(cctx, rollbackSQL)
		bound.end()
	}
	conn.Release()
}

// closeOwed rolls back every owed connection, waits for the settles under way, and owes none
// from now on.
func (s *Store) closeOwed() {
	o := s.owed
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	s.settleOwed(true)
	o.mu.Lock()
	for o.settling > 0 {
		o.settled.Wait()
	}
	o.mu.Unlock()
}
