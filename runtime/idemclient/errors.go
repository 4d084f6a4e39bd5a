package idemclient

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrKeyReused is what an [*Error] with code key-reused matches (errors.Is): the server
	// already saw this key with a different request. That is a bug in the caller, never a
	// transient failure: a key names one logical operation, so a new operation needs a new key
	// and a retry must resend the request unchanged.
	ErrKeyReused = errors.New("idemclient: the idempotency key was already used for a different request (a client bug: use a new key for each new operation, and resend a retried one unchanged)")
	// ErrOperationUncertain is what an [*Error] with code operation-uncertain matches
	// (errors.Is): an earlier attempt with this key was interrupted after it called a provider
	// (a card acquirer, a bank), so whether it took effect is not known yet. The server will not
	// run the key again until an operator or a reconciliation with the provider's records
	// settles it; then the same key answers with the outcome (or runs anew if the attempt took
	// no effect). Retrying now cannot help, and retrying with a new key could do the operation
	// twice: report it as pending, and ask again later with the same key.
	ErrOperationUncertain = errors.New("idemclient: the outcome of an earlier attempt with this key is uncertain; the server settles it (do not retry with a new key)")
	// ErrAttemptsExhausted: [Options.MaxAttempts] attempts that counted (the server answered
	// them with a failure a retry may fix) were made and none gave a final answer.
	ErrAttemptsExhausted = errors.New("idemclient: attempts exhausted")
	// ErrDeadline: the next attempt could only start after the call's deadline (the context's,
	// or [Options.MaxElapsed] after the first attempt), so it was not waited for.
	ErrDeadline = errors.New("idemclient: the next attempt would start after the deadline")
	// ErrBodyTooLarge: the request body is over [Options.MaxBodyBytes], so it cannot be kept to
	// be sent again; nothing was sent.
	ErrBodyTooLarge = errors.New("idemclient: request body too large to buffer for retries")
)

// Error is an answer of the API that ends a call with an error status (4xx, 5xx): a problem
// (RFC 9457) decoded, or just the status when the body is not one.
type Error struct {
	Status int    // the HTTP status of the answer
	Code   string // the problem's code: key-reused, in-progress, …; "" when the body is no problem
	Type   string // the problem's type URI
	Title  string
	Detail string
	// Route is the operation ("POST /v1/payments") and Key the key the call sent, when the
	// error comes from a call ("" for a path key).
	Route, Key string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("idemclient: ")
	if e.Route != "" {
		b.WriteString(e.Route + ": ")
	}
	fmt.Fprintf(&b, "%d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	} else if e.Title != "" {
		b.WriteString(": " + e.Title)
	}
	switch e.Code {
	case CodeKeyReused:
		b.WriteString(" (the key was reused with another request: a client bug, use a new key for each new operation)")
	case CodeOperationUncertain:
		b.WriteString(" (the outcome is uncertain until the server settles it: ask again later with the same key, never a new one)")
	}
	return b.String()
}

// Is makes a key-reused problem match [ErrKeyReused], and an operation-uncertain one
// [ErrOperationUncertain].
func (e *Error) Is(target error) bool {
	return (target == ErrKeyReused && e.Code == CodeKeyReused) ||
		(target == ErrOperationUncertain && e.Code == CodeOperationUncertain)
}

// GiveUpError ends a call that got no final answer: attempts ran out, the deadline would pass
// before the next attempt, or the context ended. The operation may or may not have run on the
// server; resend it with the same key ([WithKey](e.Key)) to find out, and get its outcome.
type GiveUpError struct {
	Route    string
	Key      string // "" for a path key
	Attempts int
	Elapsed  time.Duration
	// Why is [ErrAttemptsExhausted], [ErrDeadline], or the context's error.
	Why error
	// Bound says which limit ended the call, for the message: "the context's deadline",
	// "MaxElapsed (2m0s)", "MaxAttempts (10 answered attempts)".
	Bound string
	// Wait is the wait the next attempt needed, when Why is ErrDeadline.
	Wait time.Duration
	// Last is the last attempt's outcome: a transport error, or an [*Error] such as the 409
	// in-progress it kept getting.
	Last error
}

func (e *GiveUpError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idemclient: %s: gave up after %d attempt(s) in %s", e.Route, e.Attempts, e.Elapsed.Round(time.Millisecond))
	switch {
	case errors.Is(e.Why, ErrDeadline):
		fmt.Fprintf(&b, ": the next attempt, %s from now, would start after %s", e.Wait.Round(time.Millisecond), e.Bound)
	case errors.Is(e.Why, ErrAttemptsExhausted):
		fmt.Fprintf(&b, ": %s reached", e.Bound)
	default:
		fmt.Fprintf(&b, ": %v", e.Why)
	}
	if e.Last != nil {
		fmt.Fprintf(&b, "; last attempt: %v", e.Last)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, "; the outcome is unknown: resend with the same key %q to learn it", e.Key)
	}
	return b.String()
}

// Unwrap gives Why and Last, so errors.Is(err, context.DeadlineExceeded) and errors.As(err,
// &problem) see them.
func (e *GiveUpError) Unwrap() []error {
	out := []error{e.Why}
	if e.Last != nil {
		out = append(out, e.Last)
	}
	return out
}
