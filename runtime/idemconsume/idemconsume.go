// Package idemconsume makes a queue consumer idempotent: a message is handled at most once per
// message id, in a transaction that also records it as done, on the same claim, completion and
// history as [idem.Store.Do].
//
// A broker that delivers at least once delivers some messages twice: after a consumer died
// between its commit and its acknowledgement, after an acknowledgement was lost, after the
// acknowledgement deadline passed under a slow handler, or because the publisher sent the
// message twice. [Consumer.Process] turns each delivery into a [Result] whose [Action] tells the
// broker's adapter what to do:
//
//   - [Ack]: the handler's effect committed, now (Result.Ran) or on an earlier delivery
//     (Result.Duplicate, and the handler did not run). Acknowledge only then: the effect and
//     the message's done mark commit together, so a consumer killed after the commit and before
//     the acknowledgement gets the message again, finds it done and acknowledges it.
//   - [Redeliver]: nothing committed; deliver the message again after Result.RetryAfter. The
//     message is being handled by another delivery (in_progress), the store could not be reached
//     (store_unavailable), the handler failed or ran past its timeout, or its claim was taken
//     over (lease_lost). A consumer killed mid-handler leaves its transaction to be rolled back
//     by PostgreSQL and its claim to run out; the redelivery then runs the handler.
//   - [DeadLetter]: delivering again cannot help. The message id came with another payload than
//     the one it was first handled with (key_reused), the message has no id (no_message_id), or
//     the handler rejected it ([Reject]). Result.Reason says which, in one word, and Result.Err
//     in a sentence.
//
// The adapters for NATS JetStream (runtime/idemnats) and River (runtime/idemriver) map the
// actions to their broker's calls. This package imports only runtime/idem and pgx.
package idemconsume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Message identifies one message for [Consumer.Process].
type Message struct {
	// Tenant is the key table's tenant column (see [idem.DoParams].Tenant); empty without tenants.
	Tenant string
	// Source names where the message comes from, the scope its ID is unique in: a stream or a
	// queue ("nats:ORDERS"), a job kind ("river:send_receipt"). Two sources never share ids.
	Source string
	// ID is the message's id as its sender set it: the same on every delivery of the message and
	// on every send of it by a publisher that retried (NATS's Nats-Msg-Id header, a job's own
	// key). An empty ID is dead-lettered with reason no_message_id, since nothing could tell its
	// redeliveries apart.
	ID string
	// Fingerprint is a digest of the payload ([Fingerprint]): the same ID with another
	// fingerprint is a different message reusing the id, and is dead-lettered (key_reused).
	Fingerprint string
}

// Handler is the work done once per message. It runs inside tx, the transaction that also marks
// the message done: every write of its effect goes through tx. It must neither commit nor roll
// back tx. An error rolls the work back and the message is redelivered, unless the error is a
// [Reject], which dead-letters the message.
type Handler func(ctx context.Context, tx pgx.Tx) error

// Action is what the adapter does with a delivery.
type Action int

const (
	// Ack acknowledges the message: its effect committed.
	Ack Action = iota + 1
	// Redeliver asks the broker to deliver the message again after Result.RetryAfter.
	Redeliver
	// DeadLetter sets the message aside, with Result.Reason: delivering it again cannot help.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Redeliver:
		return "redeliver"
	case DeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Reasons of a Redeliver or DeadLetter result. Those shared with runtime/idem are its event
// names ([idem.EventInProgress], …).
const (
	ReasonInProgress       = string(idem.EventInProgress)     // another delivery holds the message
	ReasonKeyReused        = string(idem.EventKeyReused)      // the id came with another payload
	ReasonLeaseLost        = string(idem.EventLeaseLost)      // the claim was taken over under the handler
	ReasonHandlerTimeout   = string(idem.EventHandlerTimeout) // the handler ran past its timeout
	ReasonStoreUnavailable = "store_unavailable"              // the key table could not be reached
	ReasonHandlerFailed    = "handler_failed"                 // the handler returned an error
	ReasonCancelled        = "cancelled"                      // the consumer's context ended
	ReasonNoMessageID      = "no_message_id"                  // the message has no id
	ReasonRejected         = "rejected"                       // the handler rejected the message (Reject)
	ReasonUncertain        = "uncertain"                      // the key waits for Store.Resolve
)

// Result is what [Consumer.Process] decided for one delivery.
type Result struct {
	Action Action
	// Ran says the handler ran on this delivery and its effect committed.
	Ran bool
	// Duplicate says the message was done before: the handler did not run.
	Duplicate bool
	// RetryAfter (Redeliver) is when a redelivery may find the message free: the holder's
	// expected remaining time while another delivery holds it, the store's retry delay while it
	// cannot be reached, zero when the broker's own redelivery delay should apply.
	RetryAfter time.Duration
	// Reason (Redeliver, DeadLetter) says why in one word (the Reason… constants).
	Reason string
	// Err (Redeliver, DeadLetter) says why in a sentence.
	Err error
}

// Options tune a Consumer; nil means defaults. The durations have [idem.DoParams]' meanings.
type Options struct {
	// Operation names the consumer in logs, events and the key's history.
	Operation string
	// Claim is the claim mode; default idem.ClaimLease. With ClaimTransaction the claim dies
	// with a killed consumer's connection, so its redelivery runs at once instead of after the
	// lease.
	Claim idem.ClaimMode
	// Lease is how long a consumer that stopped answering holds a message before a redelivery
	// may take it over (renewed while the handler runs); default idem.DefaultLease.
	Lease time.Duration
	// Timeout bounds the handler; default the lease.
	Timeout time.Duration
	// TTL is how long a done message is remembered: longer than the broker may redeliver it and
	// than publishers may send it again (docs/consumers.md). Default idem.DefaultTTL.
	TTL time.Duration
	// Wait is how long a delivery waits for another delivery of the same message that is still
	// running before answering Redeliver (in_progress). Zero answers at once.
	Wait time.Duration
	// History keeps the key's history (Store.History): claims, takeovers, completions, releases,
	// replays, mismatches.
	History bool
}

// Consumer processes messages on a Store. It is safe for concurrent use.
type Consumer struct {
	store *idem.Store
	opts  Options
}

// New returns a Consumer on store. opts may be nil.
func New(store *idem.Store, opts *Options) *Consumer {
	c := &Consumer{store: store}
	if opts != nil {
		c.opts = *opts
	}
	return c
}

// Store returns the Store the Consumer claims on.
func (c *Consumer) Store() *idem.Store { return c.store }

// Process runs fn at most once per (Tenant, Source, ID) and says what to do with the delivery.
// It never acknowledges anything itself: the adapter acts on the Result, after Process returned,
// so an acknowledgement always follows the commit of the effect.
func (c *Consumer) Process(ctx context.Context, m *Message, fn Handler) Result {
	if m.ID == "" {
		return Result{Action: DeadLetter, Reason: ReasonNoMessageID,
			Err: fmt.Errorf("idemconsume: a message from %q has no id: its redeliveries could not be told apart, so it is not handled", m.Source)}
	}
	p := &idem.DoParams{
		Tenant: m.Tenant, Scope: m.Source, Key: m.ID, Fingerprint: m.Fingerprint,
		Operation: c.opts.Operation, Claim: c.opts.Claim, Lease: c.opts.Lease, Timeout: c.opts.Timeout,
		TTL: c.opts.TTL, Wait: c.opts.Wait, History: c.opts.History,
	}
	r, err := c.store.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if err := fn(ctx, tx); err != nil {
			return nil, err
		}
		return &idem.Outcome{}, nil
	})
	if err == nil {
		if r.Replayed {
			return Result{Action: Ack, Duplicate: true}
		}
		return Result{Action: Ack, Ran: true}
	}
	return c.failed(ctx, m, err)
}

// failed maps Do's error to a Result.
func (c *Consumer) failed(ctx context.Context, m *Message, err error) Result {
	var inProgress *idem.InProgressError
	var rejected *RejectError
	switch {
	case errors.As(err, &rejected):
		return Result{Action: DeadLetter, Reason: ReasonRejected, Err: err}
	case errors.Is(err, idem.ErrKeyReused):
		return Result{Action: DeadLetter, Reason: ReasonKeyReused,
			Err: fmt.Errorf("idemconsume: message %q from %q came before with another payload: its id was reused for a different message (%w)", m.ID, m.Source, err)}
	case errors.As(err, &inProgress):
		return Result{Action: Redeliver, Reason: ReasonInProgress, RetryAfter: inProgress.RetryAfter, Err: err}
	case errors.Is(err, idem.ErrStoreUnavailable):
		return Result{Action: Redeliver, Reason: ReasonStoreUnavailable, RetryAfter: c.store.Config().UnavailableRetryAfter, Err: err}
	case ctx.Err() != nil:
		return Result{Action: Redeliver, Reason: ReasonCancelled, Err: err}
	case errors.Is(err, idem.ErrLeaseLost):
		return Result{Action: Redeliver, Reason: ReasonLeaseLost, Err: err}
	case errors.Is(err, idem.ErrHandlerTimeout):
		return Result{Action: Redeliver, Reason: ReasonHandlerTimeout, Err: err}
	case errors.Is(err, idem.ErrUncertain):
		return Result{Action: Redeliver, Reason: ReasonUncertain, Err: err}
	}
	return Result{Action: Redeliver, Reason: ReasonHandlerFailed, Err: err}
}

// RejectError is a handler's error that dead-letters its message (see [Reject]).
type RejectError struct{ Err error }

func (e *RejectError) Error() string { return "idemconsume: message rejected: " + e.Err.Error() }

func (e *RejectError) Unwrap() error { return e.Err }

// Reject wraps err so that the handler's message is dead-lettered (reason rejected) instead of
// redelivered: for a message no redelivery can handle, such as a payload that does not parse.
// The handler's work is rolled back as for any error, and the message id stays free.
func Reject(err error) error { return &RejectError{Err: err} }

// Fingerprint returns a digest of a message's payload for [Message].Fingerprint: two payloads
// get the same fingerprint exactly when their bytes are equal.
func Fingerprint(payload []byte) string {
	h := sha256.New()
	h.Write([]byte("idemconsume payload v1\x00"))
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}
