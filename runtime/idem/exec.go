package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// execResult is what runOwned decided. For claimAcquired and claimTakenOver, fn ran and outcome
// is its answer; persisted says whether it was committed with the stored outcome.
type execResult struct {
	status     claimStatus
	outcome    *Outcome
	retryAfter time.Duration
	persisted  bool
}

// cleanupTimeout bounds a rollback or release made after the caller's context has ended: they
// must still happen, but never hang the request.
const cleanupTimeout = 5 * time.Second

// detached is ctx without its cancellation, bounded by cleanupTimeout: b.end ends the bound.
func detached(ctx context.Context) (cctx context.Context, b *boundCtx) {
	return newBound(context.WithoutCancel(ctx), cleanupTimeout)
}

// claimed is what a claim found (claimFor): the key's answer, and the business transaction the
// claim began when it owns the key; err when the claim failed.
type claimed struct {
	mode ClaimMode
	tx   *bizTx
	res  *claimResult
	err  error
}

// claimFor claims p's key in p's claim mode (claimWaiting), once the topology is known.
func (s *Store) claimFor(ctx context.Context, p *DoParams) claimed {
	// No claim before the topology is known: the wrong statement set could run fn twice.
	t, err := s.topology(ctx)
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
		return claimed{err: err}
	}
	c, path := claimed{mode: ClaimLease}, t.lease
	if p.Claim == ClaimTransaction {
		c.mode, path = ClaimTransaction, t.tx
	}
	c.tx, c.res, c.err = s.claimWaiting(ctx, path, p, c.mode)
	return c
}

// runOwned runs fn when the claim c owns the key, and otherwise says what the claim found.
func (s *Store) runOwned(ctx context.Context, c claimed, p *DoParams, fn HandlerFunc) (execResult, error) {
	if c.err != nil {
		return execResult{}, c.err
	}
	res, tx := c.res, c.tx
	if !res.status.owns() {
		return execResult{status: res.status, outcome: res.outcome, retryAfter: res.retryAfter}, nil
	}
	if tx == nil { // the claim did not begin the business transaction (lease mode): begin it now
		var err error
		if tx, err = s.begin(ctx); err != nil {
			s.release(ctx, s.givenBack(res.claim, EventReleased, "store_unavailable: the business transaction could not begin", 0))
			return execResult{}, err
		}
	}
	return s.runClaimed(ctx, tx, res.claim, p, fn, c.mode)
}

// txLockWait bounds each transaction-mode claim's wait on a concurrent holder's row lock. It is
// short because the waiting transaction holds a pool connection: a few duplicates of one slow
// request must not starve every other request of connections. Longer waits happen between
// attempts, with no connection held.
const txLockWait = 50 * time.Millisecond

// txLockWaitListening is txLockWait while notifications arrive, for a claim on the key's row.
const txLockWaitListening = 10 * time.Millisecond

// claimWaiting claims p's key through path, in claim mode mode, and settles each attempt
// (settleAttempt). While the key is held and the wait has not run out, it waits, outside any
// connection, for the holder's notification (or with a bounded backoff when there is no
// listener), and claims again: each claim may take over a lease that has meanwhile expired. A
// lease-mode claim waits only with p.Wait; a transaction-mode claim waits up to p.Wait, by
// default the lease, and the claim's own wait on the holder's lock is kept short, so that a few
// duplicates of one slow request do not hold the pool's connections.
//
// On claimAcquired and claimTakenOver the key is the caller's, and tx is open when the claim
// began it (always in transaction mode; through a pool in lease mode). On any other result tx is
// nil, the transaction begun for nothing ended (rolled back, or handed on for the connection's
// next batch to roll back: owed.go).
func (s *Store) claimWaiting(ctx context.Context, path claimer, p *DoParams, mode ClaimMode) (*bizTx, *claimResult, error) {
	pace := s.newPacer(p.Wait, 500*time.Millisecond, nil)
	if mode == ClaimTransaction {
		pace = s.newPacer(orDefault(p.Wait, lease(p)), 250*time.Millisecond, nil)
	}
	defer func() { pace.sub.close() }()
	changed := 0 // claims that found the row changed under an uncertain transition
	for {
		a, err := s.claimAndSettle(ctx, path, p, s.lockWait(path, &pace, mode))
		if err != nil {
			s.rollback(ctx, a.tx)
			return nil, nil, err
		}
		res := a.res
		if res.status.owns() {
			return a.tx, res, nil
		}
		if a.tx != nil {
			s.owe(ctx, a.tx) // begun for nothing: the connection's next batch rolls it back
		}
		if res.status == claimUncertain && res.abandoned {
			turned, err := s.turnUncertain(ctx, p, res)
			switch {
			case err != nil:
				return nil, nil, err
			case !turned && changed < claimTries-1:
				changed++
				continue // the row changed: claim again, and see what it is now
			case !turned:
				res = &claimResult{status: claimInProgress, retryAfter: time.Second}
			}
		}
		// Only a key somebody holds is waited for: in lease mode an in-progress answer, in
		// transaction mode a lock wait that ran out (an in-progress answer without it is a
		// lease-mode claim of the key, committed: not waited for).
		if res.status != claimInProgress || mode == ClaimTransaction && !a.locked {
			return nil, res, nil
		}
		if mode == ClaimLease && s.takeBack(ctx, p) {
			continue // the holder was this process's own abandoned claim, released now
		}
		if pace.subscribe(s, p) {
			continue // claim again at once: from now on the holder's completion cannot go unnoticed
		}
		again, err := pace.next(ctx)
		if err != nil {
			return nil, nil, err
		}
		if !again {
			if a.locked { // a lock wait is reported once, when the claim gives up
				s.emit(ctx, Event{Kind: EventInProgress, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
			}
			return nil, res, nil
		}
	}
}

// claimAndSettle is one claim through path, settled (settleAttempt), both bounded as a whole by
// the store timeout plus lockWait, the claim's own wait on a holder's lock: a claim whose bound
// runs out is undone like one whose caller left, and fails as the store's error.
func (s *Store) claimAndSettle(ctx context.Context, path claimer, p *DoParams, lockWait time.Duration) (attempt, error) {
	var a attempt
	err := s.bounded(ctx, lockWait, func(ctx context.Context) error {
		a = path.claim(ctx, s, p, lockWait)
		return s.settleAttempt(ctx, p, &a)
	})
	return a, err
}

// lockWait is how long a transaction-mode claim through path waits on a holder's lock in one try:
// txLockWait, shorter while notifications arrive (the holder's commit or rollback will wake the
// waiter, so the try need only find out that the key is held), never past the wait's end. A
// claim under the key's advisory lock keeps the longer wait: its holder notifies only after a
// hold that long (sql/notify_locked.sql), so that the common short hold, which wakes its waiters
// by its commit alone, notifies nobody. Lease mode claims wait on no lock: 0.
func (s *Store) lockWait(path claimer, pace *pacer, mode ClaimMode) time.Duration {
	if mode != ClaimTransaction {
		return 0
	}
	wait := txLockWait
	if _, advisory := path.(txAdvisoryLock); pace.sub.listening() && !advisory {
		wait = txLockWaitListening
	}
	return min(wait, max(pace.left(), time.Millisecond))
}

// turnUncertain applies the transition a claim found to make: the key's holder is gone after a
// provider call (res.abandoned), and the key turns uncertain. turned is false when the row changed
// meanwhile (a holder that renewed, another claim that turned it first): the caller claims again.
func (s *Store) turnUncertain(ctx context.Context, p *DoParams, res *claimResult) (turned bool, err error) {
	var made *transition
	err = s.bounded(ctx, 0, func(ctx context.Context) (err error) {
		made, err = s.apply(ctx, s.turnedUncertain(p, res))
		return err
	})
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: p.Operation, KeyHash: KeyHash(p.Scope, p.Key)})
		return false, storeError(ctx, "turn the key uncertain", err)
	}
	if made != nil {
		s.log.WarnContext(ctx, "idem: a claim found the key's holder gone after a provider call: the key is uncertain until it is resolved",
			"operation", p.Operation, "key_hash", KeyHash(p.Scope, p.Key), "attempt", res.rowAttempt)
	}
	return made != nil, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// pacer spaces the tries of a duplicate that waits for a key's holder, never sleeping past the
// end of the wait. While its subscription receives notifications it sleeps until the holder's
// (or for the Store's fallback poll); without, it backs off from 20 ms, doubling up to a cap.
type pacer struct {
	deadline     time.Time
	backoff, cap time.Duration
	sub          *subscription
	poll         time.Duration
}

// It is a value, so that a claim that never waits allocates none.
func (s *Store) newPacer(wait, cap time.Duration, sub *subscription) pacer {
	return pacer{deadline: time.Now().Add(wait), backoff: 20 * time.Millisecond, cap: cap, sub: sub, poll: s.fallbackPoll}
}

// subscribe starts listening for p's key the first time a try finds it held, so requests that
// never wait never open the listener; true means it did now. The caller then tries again at
// once: a holder that finished between the try and the subscription is seen by that try, and one
// that finishes after it notifies.
func (p *pacer) subscribe(s *Store, dp *DoParams) bool {
	if p.sub != nil || p.left() <= 0 {
		return false
	}
	p.sub = s.subscribe(dp)
	return p.sub != nil
}

// left is how long the wait still runs.
func (p *pacer) left() time.Duration { return time.Until(p.deadline) }

// next sleeps before the next try; false when the wait has run out (nothing slept).
func (p *pacer) next(ctx context.Context) (bool, error) {
	left := p.left()
	if left <= 0 {
		return false, nil
	}
	if p.sub.listening() {
		select {
		case <-p.sub.c: // something happened since the last claim (or the listener came up)
			return true, nil
		default:
		}
		p.sub.l.asleep.Add(1)
		defer p.sub.l.asleep.Add(-1)
		t := time.NewTimer(min(p.poll, left))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-p.sub.c: // the holder committed or released (or the listener reconnected)
		case <-t.C:
		}
		return true, nil
	}
	if err := sleep(ctx, min(p.backoff, left)); err != nil {
		return false, err
	}
	p.backoff = min(2*p.backoff, p.cap)
	return true, nil
}

// handlerEnd is how a handler's run ended, as [Store.runHandler] saw it.
type handlerEnd int

const (
	handlerPanicked  handlerEnd = iota // fn panicked or called runtime.Goexit: it never returned
	handlerReturned                    // fn returned in time, its lease held: out and err are its answer
	handlerTimedOut                    // fn returned after its timeout: whatever it answered is void
	handlerLeaseLost                   // another request took the key over while fn ran
)

// handlerRun is one run of a handler: how it ended and, when it returned, what it answered.
type handlerRun struct {
	end   handlerEnd
	out   *Outcome
	err   error
	start time.Time
}

// runClaimed runs fn inside tx for the held claim c, made in claim mode mode, and then settles
// the run in one place ([Store.settle]): the outcome is completed and committed, or the work is
// rolled back and the key given back. A panic in fn, or in what the completion runs of the
// application's before the transaction ends (its deferred writes' Refuse, a tracer on its pool),
// is settled too (the key given back: a give-back leaves a completed row alone), and the panic
// goes on.
func (s *Store) runClaimed(ctx context.Context, tx *bizTx, c *Claim, p *DoParams, fn HandlerFunc, mode ClaimMode) (execResult, error) {
	panicked := handlerRun{end: handlerPanicked, start: time.Now()}
	settled := false
	defer func() {
		// tx.ended: the panic came after the transaction was over (an observer of the completed
		// event, say): it committed or was given back already, and its connection may be
		// another request's now.
		if !settled && !tx.ended {
			s.settle(ctx, tx, c, p, mode, panicked)
		}
	}()
	run := s.runHandler(ctx, tx, c, p, fn, mode, panicked.start)
	res, err := s.settle(ctx, tx, c, p, mode, run)
	settled = true
	return res, err
}

// runHandler runs fn and says how it ended. In lease mode the claim was committed on its own,
// so its lease is renewed while fn runs; renewal stops when fn returns (or panics), and stops at
// the handler's timeout as well, since it runs under the handler's context.
func (s *Store) runHandler(ctx context.Context, tx *bizTx, c *Claim, p *DoParams, fn HandlerFunc, mode ClaimMode, start time.Time) handlerRun {
	tctx, cancelTimeout := s.boundHandler(withClaim(ctx, c), timeout(p))
	defer cancelTimeout()
	hctx := tctx
	var renewal *renewer // nil: no renewal, and its stop does nothing
	if mode == ClaimLease && !s.noRenew {
		// Only a renewal can lose the lease while fn runs, and it ends fn's context saying so.
		var cancel context.CancelCauseFunc
		hctx, cancel = context.WithCancelCause(tctx)
		defer cancel(nil)
		renewal = s.renewWhileRunning(hctx, c, cancel)
	}
	defer renewal.stop()
	if tx.conn != nil { // the completion is one batch, which the handler's deferred writes join
		c.later = &deferred{tx: tx.Tx}
	}
	defer c.later.take() // closed however fn ends: a write deferred after it is refused

	out, err := fn(hctx, tx.Tx)
	late := finishHandler(tctx, cancelTimeout) // decided when fn returned, not after the renewal has stopped
	renewal.stop()
	run := handlerRun{end: handlerReturned, out: out, err: err, start: start}
	switch {
	case late:
		run.end = handlerTimedOut
	case errors.Is(context.Cause(hctx), ErrLeaseLost):
		run.end = handlerLeaseLost
	}
	return run
}

// settle finishes a handler's run: every exit of a claimed request goes through it. Work that
// must not commit is rolled back and its key given back ([Store.giveBack]); an outcome to keep
// is completed and committed with the work.
func (s *Store) settle(ctx context.Context, tx *bizTx, c *Claim, p *DoParams, mode ClaimMode, run handlerRun) (execResult, error) {
	switch run.end {
	case handlerPanicked:
		s.giveBack(ctx, tx, c, mode, EventReleased, run.start, giveBackWhy(EventReleased, nil, false))
		return execResult{}, nil // the panic goes on: nobody receives this
	case handlerTimedOut:
		ran := time.Since(run.start)
		made := s.giveBack(ctx, tx, c, mode, EventHandlerTimeout, run.start, giveBackWhy(EventHandlerTimeout, nil, false))
		return execResult{}, lostAfterCall(c, s.handlerTimedOut(ctx, c.Operation, c.hash(), timeout(p), ran, made.uncertain()))
	case handlerLeaseLost:
		s.rollback(ctx, tx) // the key is another request's now: nothing to give back
		return execResult{}, s.leaseLost(c)
	}
	err := run.err
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // the caller left: its answer would reach nobody, so nothing is kept
	}
	if err != nil {
		// Asked before the rollback hands the connection back to the pool, and to another request.
		lost := s.handlerLostStore(ctx, tx.Tx, c.Operation, c.hash(), err)
		why := giveBackWhy(EventReleased, err, ctx.Err() != nil)
		if lost != nil {
			why = giveBackWhy(EventReleased, lost, ctx.Err() != nil)
		}
		s.giveBack(ctx, tx, c, mode, EventReleased, run.start, why)
		if lost != nil {
			return execResult{}, lostAfterCall(c, lost)
		}
		return execResult{}, lostAfterCall(c, err)
	}
	if txAborted(tx.Tx) { // the completion would fail (25P02): the handler's fault, not the store's
		return execResult{}, lostAfterCall(c, s.handlerAborted(ctx, tx, c, mode, run.start))
	}
	out := run.out
	if out == nil {
		out = &Outcome{}
	}
	res := execResult{status: claimAcquired, outcome: out}
	if c.Attempt > 1 {
		res.status = claimTakenOver
	}
	if !p.Persist.IsEmpty() && !p.Persist.Contains(out.Status) {
		s.giveBack(ctx, tx, c, mode, EventReleased, run.start, fmt.Sprintf("persist: the persisted statuses do not include %d", out.Status))
		return res, nil
	}
	return s.commitOutcome(ctx, tx, c, p, mode, res, run.start)
}

// giveBack undoes a run: the business work and, in lease mode, the claim (token-guarded), so a
// retry runs anew, or, when the claim recorded a provider call under UncertainOnLoss, the key
// turns uncertain. In transaction mode the rollback itself undoes the claim, but a rolled-back
// transaction notifies nobody, so the waiting duplicates are told apart. kind is the event that
// reports it; why says it to the key's history, when it keeps one. It returns the transition
// made: nil when nothing could be given back yet (a release retried in the background).
func (s *Store) giveBack(ctx context.Context, tx *bizTx, c *Claim, mode ClaimMode, kind EventKind, start time.Time, why string) *transition {
	s.rollback(ctx, tx)
	ran := time.Since(start)
	s.est.observe(c.Operation, ran)
	if mode == ClaimLease {
		return s.release(ctx, s.givenBack(c, kind, why, ran))
	}
	t := s.rolledBack(c, kind, why, ran)
	s.record(ctx, t)
	return t
}

// commitOutcome runs the handler's deferred writes, completes c with res's outcome inside tx
// and commits them all.
func (s *Store) commitOutcome(ctx context.Context, tx *bizTx, c *Claim, p *DoParams, mode ClaimMode, res execResult, start time.Time) (execResult, error) {
	sent := time.Now() // before the database computes the key's expiry
	completeErr, commitErr := s.completeAndCommit(ctx, tx, c, res.outcome, ttl(p), sent.Sub(start))
	var refused *deferredFailed
	switch {
	case errors.As(completeErr, &refused):
		// A deferred write failed: the handler's failure, as if its statement had failed while
		// it ran. Nothing behind the write ran, the COMMIT included.
		s.giveBack(ctx, tx, c, mode, EventReleased, start, giveBackWhy(EventReleased, refused.err, false))
		return execResult{}, lostAfterCall(c, refused.err)
	case errors.Is(completeErr, ErrLeaseLost):
		if mode == ClaimLease {
			// Another request holds the key now, and this release deletes nothing. But a
			// division by zero at the completion can also come from the application (a
			// deferred trigger at the COMMIT): the key would then stay held for its lease.
			s.releaseLost(ctx, c, "lease_lost: the completion found the claim no longer its holder's")
		}
		return execResult{}, s.leaseLost(c)
	case completeErr != nil:
		s.giveBack(ctx, tx, c, mode, EventReleased, start, "store_unavailable: the completion failed")
		return execResult{}, completeErr
	case commitErr != nil:
		// Whether the commit happened is unknown. A release deletes only an in-flight row: if
		// the commit did happen, the row is complete and stays (in transaction mode, the claim
		// was part of what did or did not commit). When the release deleted the row, the work
		// certainly did not commit; otherwise the error says that it may have.
		if mode == ClaimLease && s.release(ctx, s.givenBack(c, EventReleased, "store_unavailable: the commit's answer was lost", time.Since(start))) != nil {
			return execResult{}, commitErr
		}
		return execResult{}, &commitUnknownError{commitErr}
	}
	res.persisted = true
	if s.cache != nil {
		s.cache.put(cacheKey{p.Tenant, p.Scope, p.Key}, p.Fingerprint, res.outcome, sent.Add(time.Duration(millis(ttl(p)))*time.Millisecond))
	}
	ran := time.Since(start)
	s.est.observe(c.Operation, ran)
	s.emitClaim(ctx, c, Event{Kind: EventCompleted, Operation: c.Operation, Duration: ran, Attempt: c.Attempt, Completion: time.Since(sent)})
	return res, nil
}

// ErrCommitUnknown: the answer to the COMMIT of the handler's work and outcome was lost (the
// connection broke, or the caller left while it was sent), and nothing proved that it rolled
// back: the work may have committed. A retry with the same key finds out: it replays the outcome
// if the commit happened, and runs anew if it did not. It wraps the store's error, so
// IsStoreUnavailable holds for it too.
var ErrCommitUnknown = errors.New("idem: the commit's answer was lost: the work may have committed")

// commitUnknownError is a completion whose commit's answer was lost (ErrCommitUnknown).
type commitUnknownError struct{ err error }

func (e *commitUnknownError) Error() string { return ErrCommitUnknown.Error() + ": " + e.err.Error() }

func (e *commitUnknownError) Unwrap() []error { return []error{ErrCommitUnknown, e.err} }

func (s *Store) leaseLost(c *Claim) error {
	s.log.Warn("idem: lease lost: another request took the key over while the handler ran; its work was rolled back (raise the lease or keep renewal on)",
		"operation", c.Operation, "key_hash", c.hash())
	return fmt.Errorf("%w (operation %s)", ErrLeaseLost, c.Operation)
}

// release gives a key back after its work rolled back (t, a givenBack transition) and returns
// the transition made, nil when none was: the row was not the claim's any more, or the release
// failed and is retried in the background (release.go).
func (s *Store) release(ctx context.Context, t *transition) *transition {
	made, _ := s.tryRelease(ctx, t)
	return made
}

// releaseLost gives back a claim that may or may not have been made (its batch failed, or its
// completion found it taken over), why its history's reason: like release, but a claim that
// had no row to give back yet is remembered and looked for again.
func (s *Store) releaseLost(ctx context.Context, c *Claim, why string) {
	t := s.givenBack(c, EventReleased, why, 0)
	if made, failed := s.tryRelease(ctx, t); made == nil && !failed {
		// Nothing to give back yet. But the server runs what it received whether or not its
		// answer arrives: a COMMIT sent on a connection that broke may still commit the claim
		// after this release looked (TestGuarantees: lost COMMIT answer). So the claim is
		// remembered as abandoned (a claim of the key from this process takes it back) and
		// looked for again in the background, a little later.
		s.abandon(t)
		s.recheckLost(ctx, t)
	}
}

// tryRelease applies t, a give-back, bounded by cleanupTimeout however ctx ends; failed says the
// statement failed, and the give-back is retried in the background.
func (s *Store) tryRelease(ctx context.Context, t *transition) (made *transition, failed bool) {
	cctx, bound := detached(ctx)
	defer bound.end()
	made, err := s.apply(cctx, t)
	if err != nil {
		s.emit(ctx, Event{Kind: EventStoreError, Operation: t.c.Operation, KeyHash: t.c.hash()})
		s.releaseLater(ctx, t, storeError(cctx, "release", err))
		return nil, true
	}
	return made, false
}

// recheckLost applies t, the give-back of a claim whose answer was lost, once more after a short
// while, in the background: see releaseLost.
func (s *Store) recheckLost(ctx context.Context, t *transition) {
	bg := s.bg
	select {
	case <-bg.closing:
		return
	case bg.slots <- struct{}{}:
	default:
		return // busy: the abandoned claim is taken back by this process's next claim of the key
	}
	bg.wg.Add(1)
	go func() {
		defer bg.wg.Done()
		defer func() { <-bg.slots }()
		for _, wait := range []time.Duration{50 * time.Millisecond, 500 * time.Millisecond} {
			timer := time.NewTimer(wait)
			select {
			case <-bg.closing:
				timer.Stop()
				return
			case <-timer.C:
			}
			cctx, bound := detached(context.WithoutCancel(ctx))
			made, err := s.apply(cctx, t)
			bound.end()
			if err == nil && made != nil {
				s.forget(t)
				return
			}
		}
	}()
}

// boundHandler is the handler's context, ended at timeout with cause ErrHandlerTimeout. pgx
// drops a connection whose statement's context ended, and sends the server a cancel request as
// it does, so a statement waiting on a lock stops waiting there too and its transaction (in
// transaction mode, with the claim) is rolled back on the server (TestHandlerTimeoutEndsAWaitOnALock
// checks that). finishHandler(hctx, cancel) ends the context and says whether the timeout had
// fired by then; it may be called more than once, and so may cancel.
func (s *Store) boundHandler(ctx context.Context, timeout time.Duration) (hctx context.Context, cancel context.CancelFunc) {
	return context.WithTimeoutCause(ctx, timeout, ErrHandlerTimeout)
}

// finishHandler ends hctx, a boundHandler context whose cancel is cancel, and says whether its
// timeout had fired by then. (A function, not a closure boundHandler returns: one allocation
// less per request.)
func finishHandler(hctx context.Context, cancel context.CancelFunc) bool {
	cancel() // from here on the cause cannot change: whichever ended the context first decided
	return errors.Is(context.Cause(hctx), ErrHandlerTimeout)
}

// handlerTimedOut reports a handler that ran past its timeout and returns the error saying so;
// uncertain says its give-back turned the key uncertain instead of releasing it.
func (s *Store) handlerTimedOut(ctx context.Context, op, keyHash string, timeout, ran time.Duration, uncertain bool) error {
	msg := "idem: the handler ran past its timeout; its work was rolled back and the key released (raise the operation's timeout, or find what it waited for)"
	if uncertain {
		msg = "idem: the handler ran past its timeout after a provider call; its work was rolled back and the key is uncertain until it is resolved (idemgen keys resolve, or reconciliation)"
	}
	s.log.WarnContext(ctx, msg, "operation", op, "key_hash", keyHash, "timeout", timeout, "duration", ran)
	return fmt.Errorf("%w (operation %s, timeout %s)", ErrHandlerTimeout, op, timeout)
}

// renewWhileRunning renews c's lease every third of it until its stop is called. If the lease
// was lost anyway (renewals failed for a whole lease and another request took over), it cancels
// the handler's context with ErrLeaseLost: its work cannot commit.
//
// Most handlers return long before their first renewal is due, so nothing runs for them until
// then: the first renewal is scheduled on the sweeper (afterBound), and only a handler still
// running at that point gets the goroutine that renews it.
func (s *Store) renewWhileRunning(ctx context.Context, c *Claim, cancel context.CancelCauseFunc) *renewer {
	r := &renewer{s: s, ctx: ctx, c: c, cancel: cancel, period: max(c.Lease/3, time.Millisecond), done: make(chan struct{})}
	r.wg.Add(1)
	r.first.deadline, r.first.due = time.Now().Add(r.period), r.run
	sweeper.add(&r.first) // afterBound(r.period, r.run), its entry allocated with r
	return r
}

// renewer is renewWhileRunning's renewal of one claim: its state in one allocation.
type renewer struct {
	s      *Store
	ctx    context.Context // the handler's
	c      *Claim
	cancel context.CancelCauseFunc // ends ctx with ErrLeaseLost
	period time.Duration
	done   chan struct{} // closed by stop
	wg     sync.WaitGroup
	first  boundCtx // the first renewal, on the sweeper
	once   sync.Once
}

// run renews every period until stop, the handler's context ending, or the lease found lost.
func (r *renewer) run() {
	defer r.wg.Done()
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-r.ctx.Done():
			return
		default:
		}
		// A renewal that cannot finish before the next one is due has failed; the next
		// tick tries again on a fresh connection.
		rctx, rcancel := context.WithTimeout(r.ctx, max(r.period, 100*time.Millisecond))
		err := r.s.renew(rctx, r.c)
		rcancel()
		if errors.Is(err, ErrLeaseLost) {
			r.cancel(ErrLeaseLost)
			return
		}
		if err != nil && r.ctx.Err() == nil {
			r.s.log.Warn("idem: lease renewal failed; will retry", "operation", r.c.Operation, "key_hash", r.c.hash(), "error", err)
		}
		select {
		case <-r.done:
			return
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// stop ends the renewals and waits for one under way. It may be called more than once, and on
// a nil r (no renewal) does nothing.
func (r *renewer) stop() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		close(r.done)
		if r.first.unschedule() { // the first renewal was not due yet: nothing started
			r.wg.Done()
		}
		r.wg.Wait()
	})
}

// handlerLostStore is ErrStoreUnavailable, wrapping fn's error, when fn failed because the
// database went away under it: its transaction's connection is closed, or its error is one only a
// lost or refused database connection gives (lostStore). Then the request failed for the store's
// reason, not the handler's, and is answered as an outage (HTTP: 503 store-unavailable). Nil for
// any other error, and when the caller's own context ended (the client went away).
func (s *Store) handlerLostStore(ctx context.Context, tx pgx.Tx, op, keyHash string, err error) error {
	if ctx.Err() != nil || (!lostStore(err) && !connLost(tx)) {
		return nil
	}
	s.emit(ctx, Event{Kind: EventStoreError, Operation: op, KeyHash: keyHash})
	return fmt.Errorf("%w: operation %s: the database connection was lost while the handler ran; its work was rolled back: %w",
		ErrStoreUnavailable, op, err)
}

// connLost says the business transaction's connection is gone: any error of the handler's is
// then the store's.
func connLost(tx pgx.Tx) bool {
	c := tx.Conn()
	return c != nil && c.IsClosed()
}
