package idem

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A bound ends at its deadline with context.DeadlineExceeded, reports the deadline, and ends
// what was derived from it.
func TestBoundEndsAtItsDeadline(t *testing.T) {
	ctx, cancel := withBound(context.Background(), 30*time.Millisecond)
	defer cancel()
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 30*time.Millisecond {
		t.Fatalf("Deadline() = %v, %v; want about 30ms from now, true", d, ok)
	}
	child, cancelChild := context.WithCancel(ctx)
	defer cancelChild()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { close(fired) })
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a bound of 30ms had not ended after 10s")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err() = %v; want context.DeadlineExceeded", ctx.Err())
	}
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a context derived from an ended bound had not ended after 10s")
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("context.AfterFunc on an ended bound had not run after 10s")
	}
}

// A bound ended by its cancel, or by its parent, says so, and leaves nothing pending.
func TestBoundCancelledBeforeItsDeadline(t *testing.T) {
	ctx, cancel := withBound(context.Background(), time.Hour)
	if ctx.Err() != nil {
		t.Fatalf("a new bound of an hour: Err() = %v; want nil", ctx.Err())
	}
	cancel()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after cancel: Err() = %v; want context.Canceled", ctx.Err())
	}
	cancel() // a second call does nothing

	parent, cancelParent := context.WithCancel(context.Background())
	ctx, cancel = withBound(parent, time.Hour)
	defer cancel()
	cancelParent()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after the parent's cancel: Err() = %v; want context.Canceled", ctx.Err())
	}
	cancel()
	sweeper.mu.Lock()
	for c := range sweeper.pending {
		if c.Context == ctx.(*boundCtx).Context {
			t.Error("a cancelled bound is still pending")
		}
	}
	sweeper.mu.Unlock()
}

// A parent that ends no later is used as it is: nothing is added.
func TestBoundUnderAnEarlierDeadline(t *testing.T) {
	parent, cancelParent := context.WithTimeout(context.Background(), time.Minute)
	defer cancelParent()
	ctx, cancel := withBound(parent, time.Hour)
	defer cancel()
	if ctx != parent {
		t.Fatalf("withBound under an earlier deadline made a new context; want the parent itself")
	}
}

// Many bounds at once, from many goroutines, each end at its deadline or its cancel, and the
// sweeper's timer, once nothing is pending, is armed again for the next.
func TestBoundsConcurrently(t *testing.T) {
	var mine sync.Map // *boundCtx: the bounds this test made
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				ctx, cancel := withBound(context.Background(), time.Duration(1+i%20)*time.Millisecond)
				defer cancel()
				mine.Store(ctx.(*boundCtx), true)
				if i%2 == 0 {
					cancel()
					return
				}
				select {
				case <-ctx.Done():
					if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
						errs <- ctx.Err()
					}
				case <-time.After(10 * time.Second):
					errs <- errors.New("a bound of at most 20ms had not ended after 10s")
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		// Each was removed by its cancel or by the sweeper: none of this round's is pending.
		sweeper.mu.Lock()
		for c := range sweeper.pending {
			if _, ok := mine.Load(c); ok {
				t.Errorf("round %d: an ended bound is still pending", round)
			}
		}
		sweeper.mu.Unlock()
		// A pause lets the sweeper find nothing pending and leave its timer unarmed (unless
		// other tests' bounds keep it armed), so that the next round may have to arm it.
		time.Sleep(30 * time.Millisecond)
	}
}
