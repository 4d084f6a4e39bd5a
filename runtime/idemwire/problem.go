package idemwire

import "net/http"

// MediaTypeProblem is the media type of a problem (RFC 9457).
const MediaTypeProblem = "application/problem+json"

// ProblemTypePrefix begins the type URI of every problem an idemgen server writes: a problem's
// type is ProblemTypePrefix + its code.
const ProblemTypePrefix = "urn:idemgen:problem:"

// Problem codes. Each has the stable type URI ProblemTypePrefix + code.
const (
	CodeKeyMissing       = "key-missing"
	CodeKeyInvalid       = "key-invalid"
	CodeKeyReused        = "key-reused"
	CodeInProgress       = "in-progress"
	CodeStoreUnavailable = "store-unavailable"
	// CodeBodyInvalid: the request body is not what its media type says (invalid JSON, data
	// after the JSON value, a duplicate member); answered before any key is claimed.
	CodeBodyInvalid = "body-invalid"
	// CodeBodyTooLarge: the request body is over the API's limit (413).
	CodeBodyTooLarge = "body-too-large"
	// CodeRequestInvalid: a value of the request cannot be used as sent: a parameter or the body
	// could not be bound to what the API declares, or a value (a path, query or header
	// parameter, the tenant) holds a NUL byte or invalid UTF-8, which PostgreSQL text cannot
	// store (answered before any claim, or when the handler's own statement refused it, SQLSTATE
	// 22021 or 22P05).
	CodeRequestInvalid = "request-invalid"
	// CodeNotFound and CodeMethodNotAllowed: no operation at this path, or not with this method.
	CodeNotFound         = "not-found"
	CodeMethodNotAllowed = "method-not-allowed"
	// CodeInternal: the handler failed; its work was rolled back.
	CodeInternal = "internal"
	// CodeHandlerTimeout: the handler ran past the operation's timeout (by default the lease);
	// its work was rolled back and the key released, so a retry runs anew: 503.
	CodeHandlerTimeout = "handler-timeout"
	// CodeMediaTypeUnsupported: the body was sent with a Content-Type the operation does not
	// declare (or none): 415, before any claim.
	CodeMediaTypeUnsupported = "media-type-unsupported"
	// CodeNotImplemented: the server does not serve this operation yet: 501, nothing was claimed
	// or changed.
	CodeNotImplemented = "not-implemented"
	// CodeOperationUncertain: an earlier attempt with this key was lost after it called a
	// provider (x-idempotency uncertainOnLoss), so whether the provider acted is unknown; the key
	// waits for an operator or a reconciliation to settle it: 409 without Retry-After, final for
	// clients.
	CodeOperationUncertain = "operation-uncertain"
	// CodeSignatureInvalid: a webhook delivery (x-idempotency delivery) is unsigned, its
	// signature matches none of the receiver's secrets, or its signed timestamp is outside the
	// tolerance: 401, before any claim, so it binds no key.
	CodeSignatureInvalid = "signature-invalid"
)

// Retry is what another attempt with the same key and request can do about a problem.
type Retry int

const (
	// RetryNever: a retry sends the same request and gets the same answer (or, for
	// operation-uncertain, only an operator or a reconciliation settles the key): final.
	RetryNever Retry = iota
	// RetryNow: the work was rolled back and the key released, so a retry runs anew.
	RetryNow
	// RetryLater: nothing ran for this attempt; the caller is asked to come back after
	// Retry-After (the key's first request still holds it, or the store is unreachable).
	RetryLater
)

// problem is one row of the table.
type problem struct {
	code, title string
	status      int // 0: the operation's mismatchStatus
	retry       Retry
}

// problems is the one table of the problem codes: their titles, the status each is answered
// with and what a retry can do, in the order documentation lists them. A problem type has one
// title whoever writes it: RFC 9457 clients may show the title as the type's summary, so two
// titles for one type would read as two different problems.
var problems = []problem{
	{CodeKeyMissing, "Idempotency key missing", http.StatusBadRequest, RetryNever},
	{CodeKeyInvalid, "Idempotency key invalid", http.StatusBadRequest, RetryNever},
	{CodeKeyReused, "Idempotency key reused with a different request", 0, RetryNever},
	{CodeInProgress, "Request with this idempotency key in progress", http.StatusConflict, RetryLater},
	{CodeStoreUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable, RetryLater},
	{CodeBodyInvalid, "Request body invalid", http.StatusBadRequest, RetryNever},
	{CodeBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge, RetryNever},
	{CodeRequestInvalid, "Request invalid", http.StatusBadRequest, RetryNever},
	{CodeNotFound, "Not found", http.StatusNotFound, RetryNever},
	{CodeMethodNotAllowed, "Method not allowed", http.StatusMethodNotAllowed, RetryNever},
	{CodeInternal, "Internal error", http.StatusInternalServerError, RetryNow},
	{CodeHandlerTimeout, "Request processing timed out", http.StatusServiceUnavailable, RetryNow},
	{CodeMediaTypeUnsupported, "Media type unsupported", http.StatusUnsupportedMediaType, RetryNever},
	{CodeNotImplemented, "Not implemented", http.StatusNotImplemented, RetryNever},
	{CodeOperationUncertain, "The outcome of an earlier attempt is uncertain", http.StatusConflict, RetryNever},
	{CodeSignatureInvalid, "Webhook signature invalid", http.StatusUnauthorized, RetryNever},
}

// ProblemCodes returns every problem code, in the table's order.
func ProblemCodes() []string {
	codes := make([]string, len(problems))
	for i, p := range problems {
		codes[i] = p.code
	}
	return codes
}

// ProblemType is code's type URI: ProblemTypePrefix + code.
func ProblemType(code string) string { return ProblemTypePrefix + code }

// ProblemTitle returns code's title, or "" for a code that is not one of the table's.
func ProblemTitle(code string) string {
	p, _ := lookup(code)
	return p.title
}

// ProblemStatus returns the status code is answered with: 0 for key-reused, whose status is the
// operation's mismatchStatus (422 by default), and -1 for a code that is not one of the table's.
// not-found and method-not-allowed answer requests that reach no operation.
func ProblemStatus(code string) int {
	if p, ok := lookup(code); ok {
		return p.status
	}
	return -1
}

// ProblemRetry says what a retry can do about code; ok is false for a code that is not one of
// the table's (a client then judges the answer by its status).
func ProblemRetry(code string) (r Retry, ok bool) {
	p, ok := lookup(code)
	return p.retry, ok
}

func lookup(code string) (problem, bool) {
	for _, p := range problems {
		if p.code == code {
			return p, true
		}
	}
	return problem{}, false
}
