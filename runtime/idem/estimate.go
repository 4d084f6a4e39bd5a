package idem

import (
	"sync"
	"time"
)

// A duplicate that finds its key in flight is told when to come back (Retry-After). The lease
// left is a poor answer: 60s for a request that takes 10ms. The Store keeps, per operation, a
// moving estimate of how long its handler runs (every completed, released or timed-out run),
// and the answer is that estimate minus how long the holder has been running, at least 1s and
// never past the lease.
//
// An operation not seen yet (the first duplicates after a start) has no estimate. The lease
// left would be the worst guess: a client obeying it waits a minute for a request that takes
// half a second. The first guess is instead that the holder runs as long again as it has run so
// far, at least 1s: a quick handler's duplicate comes back after a second, and a slow one's after
// intervals that double, so a client obeying it polls a few times, never more often than once a
// second, and comes back at most about as late again as the handler took. The lease left
// still bounds it, and the first run observed replaces the guess with the estimate.

// maxEstimated bounds the operations a Store keeps estimates for: operations are few and known
// (a Do caller that makes up names is not), and one past the bound keeps the lease-left answer.
const maxEstimated = 256

// estimates are the per-operation handler time estimates of one Store.
type estimates struct {
	mu sync.Mutex
	m  map[string]*estimate
}

// estimate is a smoothed mean and mean deviation of handler times, updated like TCP's round-trip
// estimate (RFC 6298): gains 1/8 and 1/4, and a bound of mean plus four deviations, which a run
// rarely exceeds without being late.
type estimate struct{ mean, dev time.Duration }

func (e *estimates) observe(op string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[string]*estimate{}
	}
	est, ok := e.m[op]
	if !ok {
		if len(e.m) >= maxEstimated {
			return
		}
		e.m[op] = &estimate{mean: d, dev: d / 2}
		return
	}
	diff := d - est.mean
	if diff < 0 {
		diff = -diff
	}
	est.dev += (diff - est.dev) / 4
	est.mean += (d - est.mean) / 8
}

// expected is how long op's handler is expected to run at most; ok is false before any run.
func (e *estimates) expected(op string) (d time.Duration, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	est, ok := e.m[op]
	if !ok {
		return 0, false
	}
	return est.mean + 4*est.dev, true
}

// retryIn is the Retry-After of an in-progress answer: how long the holder of op's key is
// expected to run still (it has run for elapsed), at least 1s and never past the lease left. With
// no estimate yet, as long again as it has run.
func (s *Store) retryIn(op string, elapsed, leaseLeft time.Duration) time.Duration {
	ceiling := max(leaseLeft, time.Second)
	exp, ok := s.est.expected(op)
	if !ok {
		return RoundRetryAfter(min(max(elapsed, time.Second), ceiling))
	}
	return RoundRetryAfter(min(max(exp-elapsed, time.Second), ceiling))
}
