package idem

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
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
// The listening connection is opened by Config.ListenConn, or else from the pool's own
// configuration (its BeforeConnect and AfterConnect hooks included), when the first duplicate
// waits, and closed when none has waited for listenIdle, or by Store.Close. A DB that is not a
// *pgxpool.Pool (nor has its Config method) and no ListenConn gets no listener: its waiters poll,
// with backoff.
//
// A listener can be connected and still hear nothing: LISTEN through a pooler in transaction
// mode registers on a server connection the pooler hands to someone else afterwards, and the
// pooler drops what that connection is sent. So the listener checks itself: on connect and every
// listenCheckEvery it sends a notification of its own through the Store's DB, the way holders'
// notifications travel, and waits listenCheckWithin for it. A check that is not heard logs a
// warning, emits EventListenerDeaf and shows in Store.ListenerHealth, and the listener counts as
// down until a later check is heard: waiters poll with backoff rather than sleep for the
// fallback poll.

const (
	// fallbackPoll is how often a waiter claims again while the listener is up.
	fallbackPoll = 2 * time.Second
	// listenIdle is how long the listener stays connected with no waiter.
	listenIdle = time.Minute
	// listenCheckEvery is how often a connected listener checks that it hears.
	listenCheckEvery = 30 * time.Second
	// listenCheckWithin is how long a check waits for its own notification.
	listenCheckWithin = 2 * time.Second
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
	cctx, bound := detached(ctx)
	defer bound.end()
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
	direct  bool // connect is Config.ListenConn: it does not go through the pool's pooler

	checkEvery, checkWithin time.Duration // the self-check's pace (tests shorten it)

	mu      sync.Mutex
	subs    map[string]map[*subscription]struct{}
	count   int
	up      bool
	running bool
	stop    context.CancelFunc
	idle    *time.Timer
	closed  bool
	gen     int   // the run now current: a stopped run winding down must not report its state
	deaf    error // why the last self-check failed; nil once one is heard

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
		l.hear(ctx, gen, conn)
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

// hear hands conn's notifications to their waiters until conn fails or ctx ends, checking
// that it hears on the way: a check's notification (a payload of its own, which no key's
// notification can equal) coming back marks the listener up; one not back within checkWithin
// marks it deaf. The next check starts checkEvery after the last one ended.
//
// A new connection counts as up at once unless the last check went unheard: the check's
// notification needs a pool connection, which a crowd of polling waiters would make it wait for,
// and on a direct connection LISTEN is all it takes to hear.
func (l *listener) hear(ctx context.Context, gen int, conn *pgx.Conn) {
	l.mu.Lock()
	known := l.deaf == nil
	l.mu.Unlock()
	l.setUp(gen, known)
	var check string // the payload of the check under way; "" between checks
	due := time.Now()
	for {
		if check == "" && !time.Now().Before(due) {
			check = l.sendCheck(ctx)
			due = time.Now().Add(l.checkWithin)
			if check == "" {
				// Not sent (the store's DB refused or timed out): nothing was learnt, so try
				// again soon rather than a whole checkEvery later, which would leave a deaf
				// listener counted as hearing all that time.
				due = time.Now().Add(min(l.checkWithin, l.checkEvery))
			}
		}
		wctx, cancel := context.WithDeadline(ctx, due)
		n, err := conn.WaitForNotification(wctx)
		timedOut := err != nil && wctx.Err() != nil
		cancel()
		switch {
		case err == nil && check != "" && n.Payload == check:
			check, due = "", time.Now().Add(l.checkEvery)
			l.heard(gen)
		case err == nil:
			l.dispatch(n.Payload)
		case ctx.Err() != nil, !timedOut, conn.IsClosed():
			return
		case check != "":
			check, due = "", time.Now().Add(l.checkEvery)
			l.deafNow(gen)
		}
	}
}

// sendCheck sends a self-check notification through the Store's DB and returns its payload, or
// "" when it could not be sent.
func (l *listener) sendCheck(ctx context.Context) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	payload := "check-" + hex.EncodeToString(b[:])
	cctx, cancel := context.WithTimeout(ctx, l.s.cfg.StoreTimeout)
	defer cancel()
	if _, err := l.s.db.Exec(cctx, l.s.sql.notify, l.s.channel, payload); err != nil {
		if ctx.Err() == nil {
			l.s.log.Debug("idem: could not send the listener's self-check; trying again later", "error", err)
		}
		return ""
	}
	return payload
}

// heard records a check that came back: the listener is up, and waiters may sleep until their
// key's notification.
func (l *listener) heard(gen int) {
	l.mu.Lock()
	if gen != l.gen {
		l.mu.Unlock()
		return
	}
	wasDeaf := l.deaf != nil
	l.deaf = nil
	l.mu.Unlock()
	l.setUp(gen, true)
	if wasDeaf {
		l.s.log.Info("idem: the listener hears its notifications again; waiting duplicates wake on them", "channel", l.s.channel)
		l.s.emit(context.Background(), Event{Kind: EventListenerHeard})
	}
}

// deafNow records a check that did not come back: the listener is down (waiters poll with
// backoff) until a later check is heard.
func (l *listener) deafNow(gen int) {
	l.mu.Lock()
	if gen != l.gen {
		l.mu.Unlock()
		return
	}
	hint := "is the listening connection behind a pooler in transaction mode? LISTEN needs a session: set Config.ListenConn to a direct connection"
	l.deaf = fmt.Errorf("idem: the listener did not hear its own notification within %s (%s)", l.checkWithin, hint)
	l.mu.Unlock()
	l.setUp(gen, false)
	l.s.log.Warn("idem: the listener cannot hear notifications; waiting duplicates poll instead of waking on them",
		"channel", l.s.channel, "waited", l.checkWithin, "hint", hint, "next_check_in", l.checkEvery)
	l.s.emit(context.Background(), Event{Kind: EventListenerDeaf})
}

// ListenerHealth reports whether the Store's listener hears the notifications that wake
// waiting duplicates: nil when its last self-check was heard, or when it has not checked
// (no duplicate has waited, or the Store has no listener); otherwise an error that says what to
// look at. A deaf listener costs latency, not correctness: waiting duplicates poll instead.
func (s *Store) ListenerHealth() error {
	if s.ln == nil {
		return nil
	}
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	return s.ln.deaf
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
