package idem

import (
	"bytes"
	"container/list"
	"context"
	"sync"
	"time"
)

// The replay cache (Config.ReplayCacheBytes): completed outcomes this process stored or
// replayed, kept in memory so that the next replay of the key needs no database at all.
//
// It is safe because a completed row is final until it expires: the complete statement only
// touches rows in flight, a takeover only rows that expired (or whose lease ran out in flight),
// release only rows in flight, and purge only expired rows. So a completed outcome read once is
// the answer for its key, for its fingerprint and against every other, until the row's expiry,
// in every process. Each entry is dropped at an expiry that is never later than the row's: it
// is measured on this process's monotonic clock from a moment before the database computed the
// row's own (the start of the statement that completed or read it), so the database clock is
// never compared with the local one. Keys are the whole (tenant, scope, key) triple, so tenants
// never share an entry. Memory is bounded by bytes: least recently used entries go first, and
// an outcome larger than an eighth of the budget is not kept.

// cacheEntryOverhead is counted for every entry on top of its strings and bytes: the entry,
// its list element and map slot, the outcome and its header map.
const cacheEntryOverhead = 320

// cacheKey is a key's identity; tenants and scopes never share an entry.
type cacheKey struct{ tenant, scope, key string }

type cacheEntry struct {
	k           cacheKey
	fingerprint string
	outcome     Outcome
	expires     time.Time // on the monotonic clock; never later than the row's expiry
	size        int64
}

type replayCache struct {
	max int64 // bytes

	mu      sync.Mutex
	used    int64
	entries map[cacheKey]*list.Element // of *cacheEntry
	lru     list.List                  // front: most recently used
}

func newReplayCache(maxBytes int64) *replayCache {
	if maxBytes <= 0 {
		return nil
	}
	return &replayCache{max: maxBytes, entries: map[cacheKey]*list.Element{}}
}

// get returns k's entry if it is kept and has not expired at now: its fingerprint, and a copy of
// its outcome that the caller may change.
func (c *replayCache) get(k cacheKey, now time.Time) (fingerprint string, o *Outcome, ok bool) {
	if c == nil {
		return "", nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, found := c.entries[k]
	if !found {
		return "", nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.remove(el)
		return "", nil, false
	}
	c.lru.MoveToFront(el)
	return e.fingerprint, e.outcome.clone(), true
}

// put keeps o as k's completed outcome for fingerprint until expires. o is copied.
func (c *replayCache) put(k cacheKey, fingerprint string, o *Outcome, expires time.Time) {
	if c == nil || o == nil || !time.Now().Before(expires) {
		return
	}
	size := int64(cacheEntryOverhead + len(k.tenant) + len(k.scope) + len(k.key) + len(fingerprint) +
		len(o.Body) + len(o.Reference))
	for name, vs := range o.Header {
		size += int64(len(name)) + 16
		for _, v := range vs {
			size += int64(len(v)) + 16
		}
	}
	if size > c.max/8 {
		return // one large outcome must not empty the cache of many small ones
	}
	e := &cacheEntry{k: k, fingerprint: fingerprint, outcome: *o.clone(), expires: expires, size: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, found := c.entries[k]; found {
		c.remove(el) // a newer read of the same final row: keep the later-read copy
	}
	c.entries[k] = c.lru.PushFront(e)
	c.used += size
	for c.used > c.max {
		c.remove(c.lru.Back())
	}
}

// remove drops el; c.mu is held.
func (c *replayCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.entries, e.k)
	c.used -= e.size
}

// len is how many entries are kept (for tests and stats).
func (c *replayCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// clone copies o deeply enough that neither copy's changes show in the other.
func (o *Outcome) clone() *Outcome {
	return &Outcome{Status: o.Status, Header: o.Header.Clone(), Body: bytes.Clone(o.Body), Reference: o.Reference}
}

// remember keeps a replayed outcome read by a statement sent at sent.
func (s *Store) remember(p *DoParams, res *claimResult, sent time.Time) {
	if s.cache != nil && res.status == claimReplayed {
		s.cache.put(cacheKey{p.Tenant, p.Scope, p.Key}, p.Fingerprint, res.outcome, sent.Add(res.final))
	}
}

// cached answers p from the replay cache: a replay, or ErrKeyReused for another fingerprint.
func (s *Store) cached(ctx context.Context, p *DoParams) (r *DoResult, hit bool, err error) {
	if s.cache == nil { // off: not even the clock is read
		return nil, false, nil
	}
	fp, o, ok := s.cache.get(cacheKey{p.Tenant, p.Scope, p.Key}, time.Now())
	if !ok {
		return nil, false, nil
	}
	if fp != p.Fingerprint {
		s.emit(ctx, Event{Kind: EventKeyReused, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key), Cached: true})
		s.countAnswer(p, EventKeyReused)
		return nil, true, ErrKeyReused
	}
	s.emit(ctx, Event{Kind: EventReplayed, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key), Cached: true, Early: p.early})
	s.countAnswer(p, EventReplayed)
	return &DoResult{Outcome: o, Replayed: true}, true, nil
}
