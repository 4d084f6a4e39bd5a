package idem

import (
	"context"
	"sync/atomic"
)

// Ahead is a claim made before the request it is for reaches its handler. idemhttp's edge claims
// a request's key as soon as it has read the request as sent: a retry of a completed key is then
// answered before the router, the binding and validation, and a new key's claim costs what Do's
// own would, since Do, called later with the same params and a context carrying the Ahead
// (WithAhead), takes its claim instead of claiming again. Whatever the claim found (a key in
// flight, another fingerprint, an uncertain key, a store error) Do answers as its own claim would
// have. A request that never reaches Do (refused by binding or validation) gives back what the
// claim took through Drop: the key is free again before that refusal leaves the server.
type Ahead struct {
	claimed
	s     *Store
	p     DoParams
	taken atomic.Bool // by Do, or by Drop
}

// aheadKey keeps a request's Ahead in its context.
type aheadKey struct{}

// WithAhead is ctx carrying a, for the Do that serves the request.
func WithAhead(ctx context.Context, a *Ahead) context.Context {
	return context.WithValue(ctx, aheadKey{}, a)
}

// ClaimAhead claims p's key as Do would, now. A completed key whose fingerprint matches is
// answered at once: the replay, counted and reported as Do's are, its event marked Early. Any
// other answer is an Ahead for Do (WithAhead), whose Drop must be called once the request is
// answered. Both are nil when p is not one Do would claim (no key, UncertainOnLoss with
// ClaimTransaction): Do then decides alone.
func (s *Store) ClaimAhead(ctx context.Context, p *DoParams) (*DoResult, *Ahead) {
	if p == nil || p.Key == "" || p.UncertainOnLoss && p.Claim == ClaimTransaction {
		return nil, nil
	}
	a := &Ahead{s: s, p: *p}
	a.p.early = true
	if r, hit, err := s.cached(ctx, &a.p); hit {
		if err == nil {
			return r, nil
		}
		a.err = err // another fingerprint: Do refuses it
		return nil, a
	}
	a.claimed = s.claimFor(ctx, &a.p)
	if a.err == nil && a.res.status == claimReplayed {
		return &DoResult{Outcome: a.res.outcome, Replayed: true}, nil
	}
	return nil, a
}

// takeAhead is the Ahead ctx carries for p's request, taken by the caller, or nil. One made for
// the same key with other params (which the edge never makes) is given back first: Do's own
// claim would otherwise wait for it.
func (s *Store) takeAhead(ctx context.Context, p *DoParams) *Ahead {
	a, _ := ctx.Value(aheadKey{}).(*Ahead)
	if a == nil || a.s != s {
		return nil
	}
	q := &a.p
	if q.Tenant != p.Tenant || q.Scope != p.Scope || q.Key != p.Key {
		return nil
	}
	if q.Operation != p.Operation || q.Fingerprint != p.Fingerprint || q.Claim != p.Claim {
		a.Drop(ctx)
		return nil
	}
	if !a.taken.CompareAndSwap(false, true) {
		return nil
	}
	return a
}

// Drop gives back what a holds unless Do took it: the claim of a request answered without its
// handler. It is safe to call more than once, and on a nil Ahead. As giveBack, but no handler
// ran, so no handler time is observed (estimate.go): refused requests must not shorten the
// Retry-After of duplicates.
func (a *Ahead) Drop(ctx context.Context) {
	if a == nil || !a.taken.CompareAndSwap(false, true) || a.err != nil || !a.res.status.owns() {
		return
	}
	const why = "refused: the request was answered before its handler ran (binding or validation)"
	s, c := a.s, a.res.claim
	ctx = context.WithoutCancel(ctx)
	s.rollback(ctx, a.tx)
	if a.mode == ClaimLease {
		s.release(ctx, s.givenBack(c, EventReleased, why, 0))
		return
	}
	s.record(ctx, s.rolledBack(c, EventReleased, why, 0))
}
