package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A duplicate that waits for its key's first request (lease mode with a wait, and transaction
// mode) wakes the moment that request commits or releases: complete and release send a NOTIFY on
// the key table's channel, and each Store LISTENs on one connection of its own, which it shares
// among all its waiters. A waiter holds no pool connection while it waits. It still claims again
// now and then (fallbackPoll), in case a notification is lost: the listener was reconnecting, or
// the holder crashed and its lease ran out.
//
// The listening connection is opened from the pool's own configuration (its BeforeConnect and
// AfterConnect hooks included) when the first duplicate waits, and closed when none has waited
// for listenIdle, or by Store.Close. A DB that is not a *pgxpool.Pool (nor has its Config method)
// gets no listener: its waiters poll, with backoff.

const (
	// fallbackPoll is how often a waiter claims again while the listener is up.
	fallbackPoll = 2 * time.Second
	// listenIdle is how long the listener stays connected with no waiter.
	listenIdle = time.Minute
)

// waits says whether duplicates of p may wait for its holder: only then do p's complete and
// release notify, since a notifying commit serialises on PostgreSQL's notification queue lock.
func waits(p *DoParams) bool { return p.Claim == ClaimTransaction || p.Wait > 0 }

// channelOf is the channel the key table's notifications go on: named after the table, so two
// stores on two tables of one database never wake each other's waiters.
func channelOf(table string) string {
	h := sha256.Sum256([]byte(table))
	return "idem_" + hex.EncodeToString(h[:8])
}

// notifyID identifies a key in a notification without revealing it (anyone who may LISTEN on
// the database reads the payloads): a hash of the key's row. Stored text holds no NUL, so the
// NUL separators keep the three apart.
func notifyID(row rowID) string {
	h := sha256.New()
	io.WriteString(h, row.tenant)
	h.Write([]byte{0})
	io.WriteString(h, row.scope)
	h.Write([]byte{0})
	io.WriteString(h, row.key)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// note is the channel and payload c's complete and release send, or two empty strings when no
// duplicate may wait for c.
func (s *Store) note(c *Claim) (channel, payload string) {
	if !c.notify {
		return "", ""
	}
	return s.channel, notifyID(c.row)
}

// notifyWaiters tells the waiters of c's key that something happened to it, on its own: after
// a transaction-mode rollback (which undid the claim but, being a rollback, notified nobody), or
// after a commit whose batch could not carry the notification (a DB that is not a pool). Best
// effort: a waiter that misses it finds out at its next fallback claim.
func (s *Store) notifyWaiters(ctx context.Context, c *Claim) {
	channel, payload := s.note(c)
	if channel == "" {
		return
	}
	cctx, cancel := detached(ctx)
	defer cancel()
	if _, err := s.db.Exec(cctx, s.sql.notify, channel, payload); err != nil {
		s.log.DebugContext(ctx, "idem: could not tell waiting duplicates that the key is free; they find out at their next claim",
			"operation", c.Operation, "key_hash", c.hash(), "error", err)
	}
}

// poolConnector opens a connection configured as db's pool's connections are, or is nil when db
// is not a pool.
func poolConnector(db DB) func(ctx context.Context) (*pgx.Conn, error) {
	p, ok := db.(interface{ Config() *pgxpool.Config })
	if !ok {
		return nil
	}
	pc := p.Config()
	if pc == nil || pc.ConnConfig == nil {
		return nil
	}
	return func(ctx context.Context) (*pgx.Conn, error) {
		cc := pc.ConnConfig.Copy()
		if pc.BeforeConnect != nil {
			if err := pc.BeforeConnect(ctx, cc); err != nil {
				return nil, err
			}
		}
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			return nil, err
		}
		if pc.AfterConnect != nil {
			if err := pc.AfterConnect(ctx, conn); err != nil {
				conn.Close(ctx)
				return nil, err
			}
		}
		return conn, nil
	}
}

// listener is a Store's one LISTEN connection and the waiters it wakes.
type listener struct {
	s       *Store
	connect func(ctx context.Context) (*pgx.Conn, error)

	mu      sync.Mutex
	subs    map[string]map[*subscription]struct{}
	count   int
	up      bool
	running bool
	stop    context.CancelFunc
	idle    *time.Timer
	closed  bool
	gen     int // the run now current: a stopped run winding down must not report its state

	asleep atomic.Int64 // waiters asleep until a notification, for tests
}

// subscription is one waiter's interest in one key: c gets a signal when the key's holder has
// committed or released, and when the listener (re)connects, since a notification may have been
// missed while it was down.
type subscription struct {
	l  *listener
	id string
	c  chan struct{}
}

// subscribe registers interest in p's key, before the caller claims it (so no notification sent
// after the claim is missed); nil when the Store has no listener. Close it when done.
func (s *Store) subscribe(p *DoParams) *subscription {
	l := s.ln
	if l == nil {
		return nil
	}
	sub := &subscription{l: l, id: notifyID(rowOf(p)), c: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if l.subs[sub.id] == nil {
		l.subs[sub.id] = map[*subscription]struct{}{}
	}
	l.subs[sub.id][sub] = struct{}{}
	l.count++
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if !l.running {
		l.start()
	}
	return sub
}

// listening says notifications are being received, so the waiter may rely on them.
func (sub *subscription) listening() bool {
	if sub == nil {
		return false
	}
	sub.l.mu.Lock()
	defer sub.l.mu.Unlock()
	return sub.l.up
}

func (sub *subscription) close() {
	if sub == nil {
		return
	}
	l := sub.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if set := l.subs[sub.id]; set != nil {
		delete(set, sub)
		if len(set) == 0 {
			delete(l.subs, sub.id)
		}
	}
	l.count--
	if l.count == 0 && l.running && l.idle == nil {
		l.idle = time.AfterFunc(listenIdle, l.stopIfIdle)
	}
}

func wake(sub *subscription) {
	select {
	case sub.c <- struct{}{}:
	default: // already signalled: one wake-up covers both
	}
}

// start runs the listener; l.mu is held.
func (l *listener) start() {
	ctx, cancel := context.WithCancel(context.Background())
	l.gen++
	l.running, l.stop = true, cancel
	l.s.bg.wg.Add(1)
	go func(gen int) {
		defer l.s.bg.wg.Done()
		l.run(ctx, gen)
	}(l.gen)
}

func (l *listener) stopIfIdle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == 0 && l.running {
		l.stop()
		l.running, l.idle = false, nil
	}
}

// close stops the listener for good (Store.Close).
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	if l.idle != nil {
		l.idle.Stop()
	}
	stop := l.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// setUp records whether notifications arrive and wakes every waiter: on the way up, one may
// have been missed while connecting; on the way down, waiters must go back to polling.
func (l *listener) setUp(gen int, up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.gen {
		return
	}
	l.up = up
	for _, set := range l.subs {
		for sub := range set {
			wake(sub)
		}
	}
}

func (l *listener) dispatch(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for sub := range l.subs[id] {
		wake(sub)
	}
}

// run keeps one connection listening until ctx ends, reconnecting with backoff.
func (l *listener) run(ctx context.Context, gen int) {
	s := l.s
	backoff := 50 * time.Millisecond
	for {
		conn, err := l.listen(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("idem: cannot listen for finished keys; waiting duplicates poll until it can",
				"channel", s.channel, "retry_in", backoff, "error", err)
			if sleep(ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		l.setUp(gen, true)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			l.dispatch(n.Payload)
		}
		l.setUp(gen, false)
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn.Close(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("idem: lost the connection that listens for finished keys; reconnecting (waiting duplicates poll meanwhile)",
			"channel", s.channel)
	}
}

func (l *listener) listen(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, l.s.cfg.StoreTimeout)
	defer cancel()
	conn, err := l.connect(cctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.s.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}
