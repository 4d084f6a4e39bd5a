package idemadmin

import (
	"context"
	"sync"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// DefaultRecent is how many mismatches NewRecent keeps when given n < 1.
const DefaultRecent = 100

// Mismatch is one request that came with a key already used for a different request
// (idem.EventKeyReused): a client that reuses keys, or changes a request between retries.
type Mismatch struct {
	At        time.Time
	Operation string
	KeyHash   string // the key, as logs print it: the page looks it up by this
}

// Recent remembers the latest mismatches this process answered, in memory: a bounded ring fed
// by the Store's events. The key table does not record mismatches (a mismatch writes nothing),
// so the page can show only those the processes it runs in saw; each process has its own, and a
// restart forgets them. The metric idemgen_idempotency_events_total{event="key_reused"} counts
// them across processes.
//
// A Recent is safe for concurrent use.
type Recent struct {
	mu   sync.Mutex
	ring []Mismatch
	next int // where the next mismatch goes
	full bool
	now  func() time.Time
}

// NewRecent returns a Recent that keeps the latest n mismatches (DefaultRecent when n < 1).
// Pass its Observer to idem.Config.Observer (idemprom.Chain combines it with the metrics').
func NewRecent(n int) *Recent {
	if n < 1 {
		n = DefaultRecent
	}
	return &Recent{ring: make([]Mismatch, n), now: time.Now}
}

// Observer returns the function for idem.Config.Observer. It takes a lock for a few
// instructions per mismatch and ignores every other event.
func (r *Recent) Observer() func(ctx context.Context, e idem.Event) {
	return func(_ context.Context, e idem.Event) {
		if e.Kind != idem.EventKeyReused {
			return
		}
		m := Mismatch{At: r.now(), Operation: e.Operation, KeyHash: e.KeyHash}
		r.mu.Lock()
		r.ring[r.next] = m
		r.next = (r.next + 1) % len(r.ring)
		r.full = r.full || r.next == 0
		r.mu.Unlock()
	}
}

// Mismatches returns the mismatches kept, newest first.
func (r *Recent) Mismatches() []Mismatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]Mismatch, 0, n)
	for i := range n {
		out = append(out, r.ring[(r.next-1-i+len(r.ring))%len(r.ring)])
	}
	return out
}
