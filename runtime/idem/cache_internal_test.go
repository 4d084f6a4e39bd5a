package idem

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The cache holds no more bytes than its budget, drops the least recently used entry first, and
// keeps no outcome larger than an eighth of the budget.
func TestReplayCacheIsBoundedByBytes(t *testing.T) {
	const budget = 64 << 10
	c := newReplayCache(budget)
	later := time.Now().Add(time.Hour)
	body := []byte(strings.Repeat("x", 1000))
	for i := range 1000 {
		c.put(cacheKey{"t", "s", fmt.Sprint(i)}, "fp", &Outcome{Status: 201, Body: body}, later)
		if i == 10 {
			// Key 0, used now, becomes the most recent one and outlives keys 1..10.
			if _, _, ok := c.get(cacheKey{"t", "s", "0"}, time.Now()); !ok {
				t.Fatal("key 0 was dropped while the cache was far from full")
			}
		}
		if c.used > budget {
			t.Fatalf("after %d puts the cache holds %d bytes; want at most %d", i+1, c.used, budget)
		}
	}
	if n := c.len(); n == 0 || n > budget/1000 {
		t.Fatalf("%d entries of over 1000 bytes each in a %d-byte cache", n, budget)
	}
	if _, _, ok := c.get(cacheKey{"t", "s", "999"}, time.Now()); !ok {
		t.Fatal("the most recent key was dropped")
	}
	if _, _, ok := c.get(cacheKey{"t", "s", "1"}, time.Now()); ok {
		t.Fatal("key 1, the least recently used, is still kept")
	}
	c.put(cacheKey{"t", "s", "big"}, "fp", &Outcome{Body: make([]byte, budget/8)}, later)
	if _, _, ok := c.get(cacheKey{"t", "s", "big"}, time.Now()); ok {
		t.Fatal("an outcome of an eighth of the budget was kept")
	}
}

// An entry is gone at its expiry, and one that has expired already is not kept at all.
func TestReplayCacheEntryExpires(t *testing.T) {
	c := newReplayCache(1 << 20)
	now := time.Now()
	k := cacheKey{"t", "s", "k"}
	c.put(k, "fp", &Outcome{Status: 201}, now.Add(time.Minute))
	if _, _, ok := c.get(k, now.Add(59*time.Second)); !ok {
		t.Fatal("the entry is gone before its expiry")
	}
	if _, _, ok := c.get(k, now.Add(time.Minute)); ok {
		t.Fatal("the entry is still answered at its expiry")
	}
	if c.len() != 0 || c.used != 0 {
		t.Fatalf("an expired entry is still counted: %d entries, %d bytes", c.len(), c.used)
	}
	c.put(k, "fp", &Outcome{Status: 201}, now.Add(-time.Second))
	if c.len() != 0 {
		t.Fatal("an outcome that had expired already was kept")
	}
}
