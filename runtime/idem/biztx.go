package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bizTx is the business transaction a handler runs in, and how it ends. When the Store's DB is
// a pool it can take connections from (*pgxpool.Pool), the Store holds the connection itself:
// its begin can then travel in the same batch as a transaction-mode claim, and the completion
// and the commit travel together, so that an idempotent request costs the round trips of the
// same work without idempotency plus, in lease mode, the claim's one.
type bizTx struct {
	pgx.Tx
	conn *pgxpool.Conn // nil when the DB is not a pool: the transaction then ends the plain way
	// owed: conn still has the transaction of an earlier request open (owed.go), which the next
	// batch sent on it rolls back first.
	owed bool
	// sent: send used first, the batch that begins the transaction, allocated with it.
	sent  bool
	first batch
	// ended: the transaction is over for this request, committed or rolled back, and its
	// connection (when the Store held one) handed back: nothing of it may be touched again.
	ended bool
}

// acquirer is what *pgxpool.Pool offers beyond DB.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

// acquire takes a connection from the pool for a request's batches, with the statements they
// send prepared on it by name (see batched).
func (s *Store) acquire(ctx context.Context, pool acquirer) (*pgxpool.Conn, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.topology(ctx)
	if err != nil {
		conn.Release()
		return nil, err
	}
	mode := s.execMode
	if !s.execModeKnown {
		mode = conn.Conn().Config().DefaultQueryExecMode // a copy of the whole configuration
	}
	switch mode {
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
		if t.pooled {
			// A pooler in transaction mode would run the next request's statements on another
			// server connection, where nothing is prepared (topology.go).
			return conn, nil
		}
	default:
		// The pool prepares nothing by name (perhaps for a pooler such as pgbouncer that does
		// not keep prepared statements): neither does the Store, and pgx has no cache to forget.
		return conn, nil
	}
	// The connection's own data says whether this Store's statements were prepared on it: one
	// lookup, where asking pgx of each statement hashes its whole text. Only a Deallocate by the
	// application can make the mark stale; pgx then prepares what a batch lacks by itself, in one
	// more round trip.
	mark := conn.Conn().PgConn().CustomData()
	if mark[s.preparedMark] != nil {
		return conn, nil
	}
	for _, sql := range s.sql.batched {
		if _, err := conn.Conn().Prepare(ctx, sql, sql); err != nil {
			conn.Release()
			return nil, err
		}
	}
	mark[s.preparedMark] = true
	return conn, nil
}

// begin starts the business transaction; it is bounded by Config.StoreTimeout, and the
// transaction itself then runs under ctx.
func (s *Store) begin(ctx context.Context) (*bizTx, error) {
	bt := &bizTx{}
	err := s.bounded(ctx, 0, func(bctx context.Context) (err error) {
		pool, ok := s.db.(acquirer)
		if !ok {
			bt.Tx, err = s.db.Begin(bctx)
			return err
		}
		if bt.conn, err = s.acquire(bctx, pool); err != nil {
			return err
		}
		if bt.Tx, err = bt.conn.Begin(bctx); err != nil {
			bt.conn.Release()
			bt.conn = nil
		}
		return err
	})
	if err != nil {
		return nil, storeError(ctx, "begin", err)
	}
	return bt, nil
}

// beginWith starts the business transaction and sends batch in it, in one round trip when the
// Store holds the connection. ahead, when not nil, queues statements that run before the begin in
// that same round trip (outside the transaction: an error there skips the begin, and the
// transaction is then closed). The batch's results are read when it returns; on an error the
// transaction may be aborted, and the caller rolls it back. Without a pool, ahead is not sent.
func (s *Store) beginWith(ctx context.Context, ahead, batch func(b *batch)) (*bizTx, error) {
	return s.beginSending(ctx, ctx, ahead, batch)
}

// beginSending is beginWith with the connection taken under ctx, the caller's, and the batch sent
// and waited for under sendCtx: a caller gone before the Store holds a connection sends nothing
// (no claim is made for nobody), and one that leaves once the batch is on its way does not cut
// it off half-way (the server runs what it received whether or not the client still reads).
func (s *Store) beginSending(ctx, sendCtx context.Context, ahead, batch func(b *batch)) (*bizTx, error) {
	if err := ctx.Err(); err != nil {
		return nil, storeError(ctx, "begin", err)
	}
	pool, ok := s.db.(acquirer)
	if !ok {
		bt, err := s.begin(ctx)
		if err != nil {
			return nil, err
		}
		if batch == nil {
			return bt, nil
		}
		b := newBatch()
		batch(b)
		return bt, bt.SendBatch(ctx, &b.Batch).Close()
	}
	bt := &bizTx{}
	for bt.conn = s.owed.pop(); bt.conn != nil && bt.conn.Conn().IsClosed(); bt.conn = s.owed.pop() {
		bt.conn.Release() // broken while it waited (the server went away): the pool drops it
	}
	if bt.conn != nil {
		bt.owed = true
	} else if err := s.acquireIn(ctx, pool, bt); err != nil {
		return nil, storeError(ctx, "begin", err)
	} else if err := ctx.Err(); err != nil { // the caller left while it waited for a connection
		bt.done()
		return nil, storeError(ctx, "begin", err)
	}
	return bt, bt.send(sendCtx, ahead, batch)
}

// acquireIn takes bt's connection from pool, bounded by Config.StoreTimeout. Every claim calls
// beginWith inside a bound of its own (the claim's store step, or the batch's), which the
// acquire then runs under as it is: a bound inside it would end at most a claim's lock wait
// sooner, and costs a cancel context of its own (about 3,000 instructions per transaction-mode
// request). The caller's bound classifies its expiry as an outage, and its store_error event is
// reported under it (errStoreBound).
func (s *Store) acquireIn(ctx context.Context, pool acquirer, bt *bizTx) (err error) {
	if _, ok := ctx.(*boundCtx); ok {
		bt.conn, err = s.acquire(ctx, pool)
		return err
	}
	return s.bounded(ctx, 0, func(bctx context.Context) (err error) {
		bt.conn, err = s.acquire(bctx, pool)
		return err
	})
}

// send is beginWith's batch on bt's connection: the ROLLBACK it owes (owed.go), ahead, the
// BEGIN, then batch.
func (bt *bizTx) send(ctx context.Context, ahead, batch func(b *batch)) error {
	b := &bt.first
	if bt.sent {
		b = newBatch()
	} else {
		bt.sent = true
		b.QueuedQueries = b.queued[:0]
	}
	b.BeginTx(pgx.TxOptions{BeginQuery: beginSQL})
	if ahead != nil || bt.owed {
		// Batch.BeginTx wants the begin first when it is called, so the statements that go ahead
		// of it are queued after it and the begin is then moved behind them: the batch's
		// transaction is the connection's, whatever ran before the begin, and pgx closes it when
		// the begin was skipped.
		begin := b.QueuedQueries[0]
		b.QueuedQueries = b.QueuedQueries[:0]
		if bt.owed {
			b.Queue(rollbackSQL)
			bt.owed = false
		}
		if ahead != nil {
			ahead(b)
		}
		b.QueuedQueries = append(b.QueuedQueries, begin)
	}
	if batch != nil {
		batch(b)
	}
	br := bt.conn.SendBatch(ctx, &b.Batch)
	bt.Tx = br.Tx()
	return br.Close()
}

// rollback ends the transaction without its work, and gives its connection back. A failed
// rollback ends the connection's transaction anyway (pgx closes the connection).
func (s *Store) rollback(ctx context.Context, bt *bizTx) {
	if bt == nil {
		return
	}
	cctx, bound := detached(ctx)
	defer bound.end()
	_ = bt.Rollback(cctx)
	bt.done()
}

// done ends bt for this request and hands the held connection back to the pool; a connection
// still in a transaction is closed by the pool instead of reused.
func (bt *bizTx) done() {
	bt.ended = true
	if bt.conn != nil {
		bt.conn.Release()
		bt.conn = nil
	}
}

// commit commits the transaction (a request without a key).
func (s *Store) commit(ctx context.Context, bt *bizTx) error {
	defer bt.done()
	if err := bt.Commit(ctx); err != nil {
		return storeError(ctx, "commit", err)
	}
	return nil
}

// leaseLostCode is the complete statement's fence: with no row of this owner's left in flight
// it divides by zero (sql/complete.sql), so the transaction aborts and cannot commit.
const leaseLostCode = "22012"

// completeAndCommit sends the handler's deferred writes (Defer), stores o for c in bt and
// commits them all, then tells the key's waiting duplicates (sql/notify.sql) when they may wait.
// When the Store holds the connection the deferred writes, the completion, the COMMIT and the
// notification are one batch: a deferred write PostgreSQL refuses skips the rest
// (*deferredFailed: the caller gives the key back), the completion's fence aborts the
// transaction if the lease was lost, so the COMMIT behind it cannot commit the work without its
// outcome, and a failed statement skips the rest, so nobody is told of a commit that did not
// happen. The notification runs in a transaction of its own, after the commit.
// ErrLeaseLost means bt was rolled back; another error may have left it open, and committed or
// not (a lost connection): the caller releases what it holds, as after a failed commit.
func (s *Store) completeAndCommit(ctx context.Context, bt *bizTx, c *Claim, o *Outcome, ttl, ran time.Duration) (completeErr, commitErr error) {
	args, err := s.completeArgs(c, o, ttl)
	if err != nil {
		return err, nil
	}
	if bt.conn == nil { // Claim.later is nil: Defer ran the handler's writes itself
		if err := s.complete(ctx, bt.Tx, c, args); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				s.rollback(ctx, bt) // as in the batch path: a lost lease leaves nothing open
			}
			return err, nil
		}
		if err := bt.Commit(ctx); err != nil {
			return nil, storeError(ctx, "commit", err)
		}
		bt.done()
		s.notifyWaiters(ctx, c)
		return nil, nil
	}
	b := newBatch()
	writes := c.later.take() // closed when the handler returned
	wrote := 0
	queueDeferred(b, writes, &wrote)
	for _, q := range s.set().beforeComplete() {
		b.Queue(q)
	}
	b.Queue(s.completeSQL(c), args...)
	if c.history {
		evs := c.completionHistory(o.Status)
		b.Queue(s.sql.historyInsert[len(evs)], historyArgs(c.row, evs...)...)
	}
	// The COMMIT's own tag, not only that it ran: a Write of two statements behind a pooler's
	// simple protocol would hand this callback the result of the statement before it.
	committed := false
	b.Queue(commitSQL).Exec(func(tag pgconn.CommandTag) error {
		committed = tag.String() == "COMMIT"
		return nil
	})
	switch {
	case !c.notify:
	case c.locked && ran < s.notifyAfter/2:
		// Duplicates wait on the lock, and the commit that releases it wakes them: only one whose
		// bounded wait ran out sleeps until a notification, and a wait runs out only after
		// notifyAfter (Store.claimLocked). The handler returned within half of that, so the
		// hold reaches it at the commit only if the completion itself stalls for the other half;
		// a duplicate asleep then wakes at its fallback poll. Nothing is sent: the common short
		// hold costs no statement (sql/notify_locked.sql would find it too short anyway).
	case c.locked:
		channel, payload := s.note(c)
		b.Queue(s.sql.notifyLocked, channel, payload, interval(s.notifyAfter), c.argv[0], c.argv[1], c.argv[2])
	default:
		channel, payload := s.note(c)
		b.Queue(s.sql.notify, channel, payload)
	}
	err = bt.conn.SendBatch(ctx, &b.Batch).Close()
	if err == nil || committed {
		if err != nil {
			s.log.DebugContext(ctx, "idem: could not tell waiting duplicates that the key is completed; they find out at their next claim",
				"operation", c.Operation, "key_hash", c.hash(), "error", err)
		}
		bt.done() // committed: the connection is idle again (or closed by the pool if it broke)
		return nil, nil
	}
	if failed, ok := deferredFailure(err, writes, wrote); ok {
		return failed, nil // the caller gives the key back, which rolls bt back
	}
	if lost := s.completeFailed(ctx, c, err); errors.Is(lost, ErrLeaseLost) {
		s.rollback(ctx, bt)
		return lost, nil
	}
	// The batch failed: before the commit (the transaction is still open, or gone with its
	// connection) or at it. Either way nothing of it may be assumed committed or reused.
	s.rollback(ctx, bt)
	return nil, storeError(ctx, "complete and commit", err)
}

// keyRowTaken says pgErr is complete_insert.sql's fence: a unique violation on the key table,
// whose row somebody else inserted while the claim held the key's lock.
func (s *Store) keyRowTaken(pgErr *pgconn.PgError) bool {
	return pgErr.Code == "23505" && pgErr.SchemaName == s.cfg.Schema && pgErr.TableName == s.cfg.Table
}

// completeFailed classifies a failed completion: the fence's error is a lost lease.
func (s *Store) completeFailed(ctx context.Context, c *Claim, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == leaseLostCode || c.locked && s.keyRowTaken(pgErr)) {
		s.record(ctx, s.leaseLostBy(c))
		return ErrLeaseLost
	}
	s.emit(ctx, Event{Kind: EventStoreError, Operation: c.Operation, KeyHash: c.hash()})
	return fmt.Errorf("complete: %w", err)
}
