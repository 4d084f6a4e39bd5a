package idem

import (
	"sync"
	"time"
)

// A duplicate that finds its key in flight is told when to come back (Retry-After). The lease
// left is a poor answer: 60s for a request that takes 10ms. The Store keeps, per operation, a
// moving estimate of how long its handler runs (every completed, released or timed-out run),
// and the answer is that estimate minus how long the holder has been running, at least 1s and
// never past the lease. An operation not seen yet is answered with the lease left.

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
// no estimate yet, the lease left.
func (s *Store) retryIn(op string, elapsed, leaseLeft time.Duration) time.Duration {
	ceiling := max(leaseLeft, time.Second)
	exp, ok := s.est.expected(op)
	if !ok {
		return RoundRetryAfter(ceiling)
	}
	return RoundRetryAfter(min(max(exp-elapsed, time.Second), ceiling))
}
