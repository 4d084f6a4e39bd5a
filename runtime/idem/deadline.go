package idem

import (
	"context"
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
// withBound gives those internal bounds a deadline without a timer of their own: one goroutine
// (the sweeper) wakes every boundTick while any bound is pending and ends those whose deadline
// has passed, so a bound ends at most boundTick after its deadline. Such a context is a plain
// cancel context underneath, so context.AfterFunc (pgx watches every statement's context with
// it) and derived contexts take the standard library's fast path; it reports its deadline, and
// once ended by it, context.DeadlineExceeded as its error, as context.WithTimeout's does.
//
// Contexts that handler code sees keep context.WithTimeout: their children must end with
// context.DeadlineExceeded too, which only the standard library's own timer contexts give.

// boundTick is how late a bound may end after its deadline. The bounds are seconds long
// (Config.StoreTimeout, cleanupTimeout); the sweeper wakes at this rate only while one is
// pending.
const boundTick = 10 * time.Millisecond

// boundCtx is a context ended by the sweeper at its deadline (or by its parent, or its cancel).
// With due set it is no context but a call the sweeper starts in a goroutine of its own at the
// deadline (afterBound).
type boundCtx struct {
	context.Context // the cancel context underneath
	cancel          context.CancelFunc
	deadline        time.Time
	expired         atomic.Bool // ended by the sweeper at its deadline
	due             func()
}

func (c *boundCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *boundCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// bounds is the set of pending bounds and the sweeper that ends them.
type bounds struct {
	mu      sync.Mutex
	pending map[*boundCtx]struct{}
	wake    chan struct{} // a bound was added to an empty set: the sweeper may sleep no longer
	start   sync.Once
}

// sweeper serves every Store of the process: its goroutine starts with the first bound and then
// sleeps on a channel whenever nothing is pending.
var sweeper = &bounds{pending: map[*boundCtx]struct{}{}, wake: make(chan struct{}, 1)}

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
	inner, cancel := context.WithCancel(ctx)
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
	c.cancel()
}

// afterBound is time.AfterFunc(d, f) on the sweeper: f starts in a goroutine of its own at
// most boundTick after d, unless stop, which says whether it came first, is called before.
func afterBound(d time.Duration, f func()) (stop func() bool) {
	c := &boundCtx{deadline: time.Now().Add(d), due: f}
	sweeper.add(c)
	return func() bool { return sweeper.remove(c) }
}

func (b *bounds) add(c *boundCtx) {
	b.start.Do(func() { go b.run() })
	b.mu.Lock()
	first := len(b.pending) == 0
	b.pending[c] = struct{}{}
	b.mu.Unlock()
	if first {
		select {
		case b.wake <- struct{}{}:
		default: // a wake-up is already on its way
		}
	}
}

// remove takes c out of the pending set; false when it was not there (the sweeper took it).
func (b *bounds) remove(c *boundCtx) bool {
	b.mu.Lock()
	_, ok := b.pending[c]
	delete(b.pending, c)
	b.mu.Unlock()
	return ok
}

// run is the sweeper: every boundTick it ends the bounds whose deadline has passed, and while
// none is pending it sleeps until one is added.
func (b *bounds) run() {
	t := time.NewTicker(boundTick)
	defer t.Stop()
	var due []*boundCtx
	for {
		b.mu.Lock()
		idle := len(b.pending) == 0
		b.mu.Unlock()
		if idle {
			t.Stop()
			<-b.wake
			t.Reset(boundTick)
		}
		<-t.C
		now := time.Now()
		b.mu.Lock()
		for c := range b.pending {
			if !now.Before(c.deadline) {
				delete(b.pending, c)
				due = append(due, c)
			}
		}
		b.mu.Unlock()
		for i, c := range due {
			if c.due != nil {
				go c.due()
			} else {
				c.expired.Store(c.Context.Err() == nil) // a parent that ended first keeps its error
				c.cancel()
			}
			due[i] = nil
		}
		due = due[:0]
	}
}
