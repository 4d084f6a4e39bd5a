package idem

import (
	"testing"
	"time"
)

// readRow works out in Go what sql/claim_read.sql once computed in SQL: the lease's time left
// rounded up to the millisecond, other times rounded down, none below zero, and whether the row
// is fresh or takeable, all on the read's own clock.
func TestReadRowTimes(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	us, ms := time.Microsecond, time.Millisecond
	r := readRow{now: now, leaseExpires: at(1501 * us), created: at(-2999 * us), expires: at(2*ms - us)}
	if got := r.leaseLeft(); got != 2*ms {
		t.Errorf("lease left of 1.501ms: %v; want 2ms (rounded up)", got)
	}
	if got := wholeMillis(r.expires.Sub(r.now)); got != ms {
		t.Errorf("remembered for 1.999ms: %v; want 1ms (rounded down)", got)
	}
	if got := wholeMillis(r.now.Sub(r.created)); got != 2*ms {
		t.Errorf("in flight for 2.999ms: %v; want 2ms (rounded down)", got)
	}
	r = readRow{now: now, leaseExpires: farFuture, expires: farFuture}
	if left := r.leaseLeft(); left <= 0 || wholeMillis(r.expires.Sub(r.now)) <= 0 {
		t.Errorf("times at 'infinity': lease left %v, remembered for %v; want both positive", left, wholeMillis(r.expires.Sub(r.now)))
	}
	r = readRow{now: now, leaseExpires: at(-us), expires: at(-us)}
	if r.leaseLeft() != 0 || wholeMillis(r.expires.Sub(r.now)) != 0 {
		t.Errorf("times past: lease left %v, remembered for %v; want 0, 0", r.leaseLeft(), wholeMillis(r.expires.Sub(r.now)))
	}
	for _, c := range []struct {
		name            string
		r               readRow
		fresh, takeable bool
	}{
		{"in flight, lease left", readRow{sameFP: true, leaseExpires: at(us), expires: at(time.Hour)}, false, false},
		{"in flight, lease ran out, same request", readRow{sameFP: true, leaseExpires: at(-us), expires: at(time.Hour)}, false, true},
		{"in flight, lease ends now, same request", readRow{sameFP: true, leaseExpires: now, expires: at(time.Hour)}, false, true},
		{"in flight, lease ran out, another request", readRow{leaseExpires: at(-us), expires: at(time.Hour)}, false, false},
		{"complete, remembered", readRow{sameFP: true, complete: true, leaseExpires: at(-time.Hour), expires: at(us)}, false, false},
		{"complete, expires now, another request", readRow{complete: true, leaseExpires: at(-time.Hour), expires: now}, true, true},
		{"expired, lease still held", readRow{sameFP: true, leaseExpires: at(time.Second), expires: at(-time.Second)}, false, false},
		{"expired, lease ran out, another request", readRow{leaseExpires: at(-time.Second), expires: at(-time.Second)}, true, true},
	} {
		c.r.now = now
		fresh := c.r.fresh()
		if fresh != c.fresh || c.r.takeable(fresh) != c.takeable {
			t.Errorf("%s: fresh %v, takeable %v; want %v, %v", c.name, fresh, c.r.takeable(fresh), c.fresh, c.takeable)
		}
	}
}
