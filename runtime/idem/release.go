package idem

import (
	"context"
	"slices"
	"sync"
	"time"
)

// A release that fails (a dead pooled connection, a failover) would leave the key in flight for
// the rest of its lease, answering in-progress although nothing runs. Two things shorten that:
// the release is retried in the background a few times, and the Store remembers the claims it
// could not give back, so a later claim of the same key from this process that finds one of them
// in flight releases it itself and claims at once. Other processes wait for the retry, or for
// the lease to run out.

const (
	// releaseTries is how often a failed release is tried again, with backoff from
	// releaseBackoff doubling: about 3s in all, then the lease decides.
	releaseTries   = 5
	releaseBackoff = 100 * time.Millisecond
	// maxReleaseRetries bounds the retries outstanding at once; past it a failed release is
	// only remembered (an outage fails them all, and the lease ends each key anyway).
	maxReleaseRetries = 64
	// maxAbandoned bounds the claims remembered as abandoned.
	maxAbandoned = 1024
	// maxAbandonedPerRow bounds those of one row. Only one of them can be the row's holder, but
	// which one is not known here (a claim whose batch failed may or may not have been made), so
	// each is kept until a release settles it: a later duplicate's failed claim must never hide
	// the real holder's.
	maxAbandonedPerRow = 8
)

// background is what a Store runs beside requests.
type background struct {
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	slots     chan struct{} // one per outstanding release retry
	noRetry   bool          // tests: leave failed releases to later claims

	mu         sync.Mutex
	abandoned  map[rowID][]abandonedClaim // per row, oldest first: the give-back each still owes
	nAbandoned int
}

// rowID names one row of the key table: its tenant, scope and key as the table stores them
// ([storedText]), so two different requests' keys never share a rowID.
type rowID struct{ tenant, scope, key string }

func rowOf(p *DoParams) rowID {
	return rowID{storedText(p.Tenant), storedText(p.Scope), storedText(p.Key)}
}

// abandonedClaim is a claim this process gave up but could not give back: the give-back it owes
// (a givenBack transition, whose claim is t.c).
type abandonedClaim struct {
	t     *transition
	until time.Time // the lease's end, when a claim can take the key over anyway
}

func newBackground() *background {
	return &background{
		closing:   make(chan struct{}),
		slots:     make(chan struct{}, maxReleaseRetries),
		abandoned: map[rowID][]abandonedClaim{},
	}
}

// Close stops what the Store runs in the background: the connections kept for a rollback
// (owed.go) are rolled back and given back to the pool, the connection that listens for finished
// keys is closed (waiting duplicates fall back to polling), release retries not yet done are
// dropped (their keys' leases run out on their own), and it waits for the ones running; the
// replays counted for keys' histories since the last flush are written (history_write.go). Requests
// may still be served after Close. Close is safe to call more than once.
func (s *Store) Close() {
	s.bg.closeOnce.Do(func() { close(s.bg.closing) })
	s.closeOwed()
	if s.ln != nil {
		s.ln.close()
	}
	s.bg.wg.Wait()
	s.flushReplays(context.Background()) // the replays counted since the last flush
}

// releaseLater remembers t's claim as abandoned and retries t, its give-back, in the background.
func (s *Store) releaseLater(ctx context.Context, t *transition, err error) {
	s.abandon(t)
	c := t.c
	bg := s.bg
	select {
	case <-bg.closing:
	default:
		if !bg.noRetry {
			select {
			case bg.slots <- struct{}{}:
				s.log.WarnContext(ctx, "idem: release failed; retrying in the background (until it succeeds the key answers in-progress to other processes)",
					"operation", c.Operation, "key_hash", c.hash(), "error", err)
				bg.wg.Add(1)
				go s.retryRelease(context.WithoutCancel(ctx), t)
				return
			default:
			}
		}
	}
	s.log.WarnContext(ctx, "idem: release failed; the key answers in-progress to other processes until its lease ends",
		"operation", c.Operation, "key_hash", c.hash(), "error", err)
}

func (s *Store) retryRelease(ctx context.Context, t *transition) {
	defer s.bg.wg.Done()
	defer func() { <-s.bg.slots }()
	c := t.c
	backoff := releaseBackoff
	var err error
	for try := 1; try <= releaseTries; try++ {
		timer := time.NewTimer(backoff)
		select {
		case <-s.bg.closing:
			timer.Stop()
			return
		case <-timer.C:
		}
		backoff *= 2
		cctx, bound := detached(ctx)
		_, err = s.apply(cctx, t)
		bound.end()
		if err == nil {
			s.forget(t)
			s.log.InfoContext(ctx, "idem: released the key on a retry", "operation", c.Operation, "key_hash", c.hash(), "tries", try+1)
			return
		}
	}
	s.log.WarnContext(ctx, "idem: release failed on every retry; the key answers in-progress to other processes until its lease ends",
		"operation", c.Operation, "key_hash", c.hash(), "tries", releaseTries+1, "error", err)
}

// abandon remembers t's claim as one this process gave up but could not give back (t is the
// give-back it owes), beside the others remembered for its row.
func (s *Store) abandon(t *transition) {
	c := t.c
	bg := s.bg
	now := time.Now()
	bg.mu.Lock()
	defer bg.mu.Unlock()
	if bg.nAbandoned >= maxAbandoned {
		for id, list := range bg.abandoned {
			bg.abandoned[id] = slices.DeleteFunc(list, func(a abandonedClaim) bool { return now.After(a.until) })
			bg.nAbandoned -= len(list) - len(bg.abandoned[id])
			if len(bg.abandoned[id]) == 0 {
				delete(bg.abandoned, id)
			}
		}
		if bg.nAbandoned >= maxAbandoned {
			return // the lease ends it
		}
	}
	list := bg.abandoned[c.row]
	if len(list) >= maxAbandonedPerRow {
		list = list[1:] // the oldest: its lease ends first
		bg.nAbandoned--
	}
	bg.abandoned[c.row] = append(list, abandonedClaim{t: t, until: now.Add(c.Lease)})
	bg.nAbandoned++
}

// forget drops t's claim from the abandoned claims.
func (s *Store) forget(t *transition) {
	c := t.c
	bg := s.bg
	bg.mu.Lock()
	defer bg.mu.Unlock()
	list := bg.abandoned[c.row]
	kept := slices.DeleteFunc(slices.Clone(list), func(a abandonedClaim) bool { return a.t.c == c })
	bg.nAbandoned -= len(list) - len(kept)
	if len(kept) == 0 {
		delete(bg.abandoned, c.row)
	} else {
		bg.abandoned[c.row] = kept
	}
}

// takeBack releases the abandoned claims this process holds on p's key, if any; true means one
// of them was the key's holder and the key is free now, so the caller claims again. Each
// release is guarded by its claim's token, so only the real holder's deletes the row; the others
// are settled by it too (they own nothing) and forgotten. It runs only after a claim found the
// key in flight, so it costs nothing on any other path.
func (s *Store) takeBack(ctx context.Context, p *DoParams) bool {
	bg := s.bg
	bg.mu.Lock()
	list := slices.Clone(bg.abandoned[rowOf(p)])
	bg.mu.Unlock()
	freed := false
	for i := len(list) - 1; i >= 0 && !freed; i-- { // newest first: the likeliest holder
		a := list[i]
		if time.Now().After(a.until) {
			s.forget(a.t) // the lease has ended: a claim takes the key over anyway
			continue
		}
		var made *transition
		err := s.bounded(ctx, 0, func(ctx context.Context) (err error) {
			made, err = s.apply(ctx, a.t)
			return err
		})
		if err != nil {
			return false // still unreachable: the answer stays in-progress, and a later claim tries again
		}
		s.forget(a.t)
		if made != nil {
			s.log.InfoContext(ctx, "idem: a claim found this process's own abandoned claim on the key in flight and released it",
				"operation", p.Operation, "key_hash", a.t.c.hash())
			// A key the give-back turned uncertain is not free: the claim again finds it so.
			freed = true
		}
	}
	return freed
}
