package idem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// The runtime bounds every store step it takes (Config.StoreTimeout) and every cleanup
// (cleanupTimeout), so a request makes two or three such bounds, and almost none of them ever
// fires. context.WithTimeout gives each its own runtime timer, and adding a timer wakes an idle
// thread of the scheduler to watch it (wakeNetPoller): on a busy two-core server a few
// microseconds of CPU per timer, several times per request, for a deadline seconds away.
//
// withBound gives those internal bounds a deadline without a timer of their own: the sweeper
// keeps the pending bounds and one timer, armed for the earliest deadline among them; when it
// fires it ends the bounds whose deadline has passed and is armed again for the earliest left.
// Almost every bound ends long before its deadline (its step ends), so the timer seldom fires,
// and a new bound whose deadline is not the earliest (the bounds are a few fixed lengths, so a
// new one is mostly the latest) costs an entry in a map: no timer, and no goroutine woken.
// (An earlier sweeper woke every 10 ms while any bound was pending, and was woken for the first
// bound after a pause: a goroutine switch or more per request.) Such a context is a plain
// cancel context underneath, so context.AfterFunc (pgx watches every statement's context with
// it) and derived contexts take the standard library's fast path; it reports its deadline, and
// once ended by it, context.DeadlineExceeded as its error, as context.WithTimeout's does.
//
// Contexts that handler code sees keep context.WithTimeout: their children must end with
// context.DeadlineExceeded too, which only the standard library's own timer contexts give.

// boundCtx is a context ended by the sweeper at its deadline (or by its parent, or its cancel).
// With due set it is no context but a call the sweeper starts in a goroutine of its own at the
// deadline (afterBound).
type boundCtx struct {
	context.Context                         // the cancel context underneath
	cancel          context.CancelCauseFunc // errStoreBound when the sweeper ends it
	deadline        time.Time
	expired         atomic.Bool // ended by the sweeper at its deadline
	due             func()
}

// errStoreBound is the cause of a bound the sweeper ended at its deadline (context.Cause): the
// store, not the caller, ran out of time, so a store error reported under it is reported (emit),
// where one reported after the caller left is not.
var errStoreBound = errors.New("idem: the store did not answer within the runtime's bound")

func (c *boundCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *boundCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// bounds is the set of pending bounds and the timer that ends them.
type bounds struct {
	mu      sync.Mutex
	pending map[*boundCtx]struct{}
	timer   *time.Timer // runs sweep; made with the first bound
	// armed is when timer fires, no later than the earliest pending deadline; zero when it is
	// not armed (nothing was pending when it last fired).
	armed time.Time
}

// sweeper serves every Store of the process.
var sweeper = &bounds{pending: map[*boundCtx]struct{}{}}

// withBound is context.WithTimeout(ctx, d) for the runtime's internal bounds (see above). When
// ctx already ends no later, ctx itself is returned with a cancel that does nothing, as nothing
// need be added.
func withBound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	bctx, b := newBound(ctx, d)
	if b == nil {
		return bctx, func() {}
	}
	return bctx, b.end
}

// newBound is withBound for the request path, which makes a bound or two per request: b.end
// ends the bound, and no cancel function is made for it. b is nil when ctx itself is returned
// (it ends no later), and its end then does nothing.
func newBound(ctx context.Context, d time.Duration) (bctx context.Context, b *boundCtx) {
	deadline := time.Now().Add(d)
	if cur, ok := ctx.Deadline(); ok && !cur.After(deadline) {
		return ctx, nil
	}
	inner, cancel := context.WithCancelCause(ctx)
	c := &boundCtx{Context: inner, cancel: cancel, deadline: deadline}
	sweeper.add(c)
	return c, c
}

// end ends the bound c (withBound's cancel); nil does nothing.
func (c *boundCtx) end() {
	if c == nil {
		return
	}
	sweeper.remove(c)
	c.cancel(nil)
}

// afterBound is time.AfterFunc(d, f) on the sweeper: f starts in a goroutine of its own at d,
// unless c.unschedule, which says whether it came first, is called before.
func afterBound(d time.Duration, f func()) (c *boundCtx) {
	c = &boundCtx{deadline: time.Now().Add(d), due: f}
	sweeper.add(c)
	return c
}

// unschedule takes afterBound's call c off the sweeper; false when it had started.
func (c *boundCtx) unschedule() bool { return sweeper.remove(c) }

func (b *bounds) add(c *boundCtx) {
	b.mu.Lock()
	b.pending[c] = struct{}{}
	if b.armed.IsZero() || c.deadline.Before(b.armed) {
		b.arm(c.deadline)
	}
	b.mu.Unlock()
}

// arm sets the timer to fire at t; b.mu is held.
func (b *bounds) arm(t time.Time) {
	b.armed = t
	if b.timer == nil {
		b.timer = time.AfterFunc(time.Until(t), b.sweep)
		return
	}
	b.timer.Reset(time.Until(t))
}

// remove takes c out of the pending set; false when it was not there (the sweeper took it).
func (b *bounds) remove(c *boundCtx) bool {
	b.mu.Lock()
	_, ok := b.pending[c]
	delete(b.pending, c)
	b.mu.Unlock()
	return ok
}

// sweep runs when the timer fires: it ends the bounds whose deadline has passed (starting the
// calls of afterBound in goroutines of their own), and arms the timer for the earliest left. A
// sweep that finds nothing due (its bound ended before its deadline, or the timer was armed
// again meanwhile) only arms it again.
func (b *bounds) sweep() {
	var due []*boundCtx
	now := time.Now()
	var next time.Time
	b.mu.Lock()
	for c := range b.pending {
		switch {
		case !now.Before(c.deadline):
			delete(b.pending, c)
			due = append(due, c)
		case next.IsZero() || c.deadline.Before(next):
			next = c.deadline
		}
	}
	b.armed = time.Time{}
	if !next.IsZero() {
		b.arm(next)
	}
	b.mu.Unlock()
	for _, c := range due {
		if c.due != nil {
			go c.due()
		} else {
			c.expired.Store(c.Context.Err() == nil) // a parent that ended first keeps its error
			c.cancel(errStoreBound)
		}
	}
}
