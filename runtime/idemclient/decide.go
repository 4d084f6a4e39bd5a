package idemclient

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemwire"
)

// The problem codes of an idemgen server, as runtime/idemwire defines them (its problems are
// RFC 9457 application/problem+json with type ProblemTypePrefix + code). Only a problem whose
// type matches its code is read as the server's own: an API's other problems are judged by
// their status. What a retry can do about each code is idemwire's table too; a code added
// later is idemwire's only.
const (
	CodeKeyMissing           = idemwire.CodeKeyMissing
	CodeKeyInvalid           = idemwire.CodeKeyInvalid
	CodeKeyReused            = idemwire.CodeKeyReused
	CodeInProgress           = idemwire.CodeInProgress
	CodeStoreUnavailable     = idemwire.CodeStoreUnavailable
	CodeHandlerTimeout       = idemwire.CodeHandlerTimeout
	CodeBodyInvalid          = idemwire.CodeBodyInvalid
	CodeBodyTooLarge         = idemwire.CodeBodyTooLarge
	CodeRequestInvalid       = idemwire.CodeRequestInvalid
	CodeMediaTypeUnsupported = idemwire.CodeMediaTypeUnsupported
	CodeNotFound             = idemwire.CodeNotFound
	CodeMethodNotAllowed     = idemwire.CodeMethodNotAllowed
	CodeNotImplemented       = idemwire.CodeNotImplemented
	CodeInternal             = idemwire.CodeInternal
	// CodeOperationUncertain: an earlier attempt with this key was lost after it called a
	// provider, and the server waits for an operator or a reconciliation to settle the key;
	// no retry can (see [ErrOperationUncertain]).
	CodeOperationUncertain = idemwire.CodeOperationUncertain
)

// ProblemTypePrefix begins the type URI of every problem an idemgen server writes.
const ProblemTypePrefix = idemwire.ProblemTypePrefix

// HeaderReplayed is set to "true" on an answer the server replayed from its store.
const HeaderReplayed = idemwire.HeaderReplayed

// HeaderRefusal names the problem code of every problem an idemgen server answers, whatever its
// body's format: an RFC 9457 problem, or the API's own error format written by its renderer
// (an Open Banking OBErrorResponse1, say). [Classify] reads the code from it first.
const HeaderRefusal = idemwire.HeaderRefusal

// Decision is what [Classify] makes of one answer.
type Decision struct {
	// Retry says whether another attempt, with the same key and body, can change the outcome.
	Retry bool
	// Wait is the least time to wait before that attempt: the answer's Retry-After, or 0 when it
	// has none (the backoff decides then).
	Wait time.Duration
	// Reason says why, for [Options.OnRetry] and error messages: "409 in-progress",
	// "500 not stored (persist: 2xx, 3xx, 4xx)", "422 key-reused".
	Reason string
	// Stored says the server stored this answer: a retry would only replay it.
	Stored bool
	// Waiting says the answer asks the caller to come back, with nothing run for this attempt
	// that a later one could fail at again: the key's first request still holds it (409
	// in-progress), the server's store is unreachable (503 store-unavailable), or a gateway
	// found no server behind it (502, 503, 504). Such an attempt, like one with no answer at
	// all, does not count toward [Options.MaxAttempts]: only the deadlines bound them, so a
	// server restart or an orphaned request's lease is outwaited.
	Waiting bool
}

// Classify decides whether an answer of op is retried. It is the retry table of the package
// (docs/client.md prints it), in this order:
//
//   - an answer with Idempotent-Replayed: true was stored: final;
//   - the server's problems by code, read from the Idempotency-Refusal header ([HeaderRefusal]),
//     which the server sets whatever the API's error format, else from an RFC 9457 problem
//     whose type is the runtime's: in-progress, store-unavailable → retry after Retry-After,
//     Waiting;
//     handler-timeout, internal → retry (the work was rolled back and the key released);
//     key-reused, key-missing, key-invalid, body-invalid, body-too-large, request-invalid,
//     media-type-unsupported, not-found, method-not-allowed, not-implemented → final (a retry sends the same
//     request and gets the same answer); operation-uncertain → final (only an operator or a
//     reconciliation settles the key, see [ErrOperationUncertain]);
//   - 1xx, 2xx, 3xx: final;
//   - 408, 425, 429 (never stored, whatever persist says) → retry after Retry-After, if any;
//   - another 5xx → retry unless op.Persist stores it (502, 503, 504: Waiting);
//   - another 4xx → final.
//
// body is the answer's body, read to decode a problem; header may be nil.
func Classify(op *Operation, status int, header http.Header, body []byte) Decision {
	ra, _ := ParseRetryAfter(header.Get("Retry-After"), time.Now())
	if header.Get(HeaderReplayed) == "true" {
		return Decision{Reason: strconv.Itoa(status) + " replayed", Stored: true}
	}
	if code := refusalCode(status, header, body); code != "" {
		reason := strconv.Itoa(status) + " " + code
		if retry, known := idemwire.ProblemRetry(code); known {
			switch retry {
			case idemwire.RetryLater:
				return Decision{Retry: true, Wait: ra, Reason: reason, Waiting: true}
			case idemwire.RetryNow:
				return Decision{Retry: true, Reason: reason}
			}
			return Decision{Reason: reason}
		}
		// A code idemwire does not know: judged by its status, below.
	}
	reason := strconv.Itoa(status)
	switch {
	case status < 400:
		return Decision{Reason: reason, Stored: op.stores(status)}
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return Decision{Retry: true, Wait: ra, Reason: reason}
	case status >= 500:
		if op.stores(status) {
			return Decision{Reason: reason + " stored (persist: " + strings.Join(op.Persist, ", ") + ")", Stored: true}
		}
		gateway := status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
		return Decision{Retry: true, Wait: ra, Reason: reason + " not stored (persist: " + strings.Join(op.persist(), ", ") + ")", Waiting: gateway}
	}
	return Decision{Reason: reason, Stored: op.stores(status)}
}

// refusalCode is the runtime's problem code of an answer: the Idempotency-Refusal header's, else
// that of an RFC 9457 problem whose type is the runtime's, else "".
func refusalCode(status int, header http.Header, body []byte) string {
	if code := idemwire.RefusalCode(header); code != "" {
		return code
	}
	if p := DecodeProblem(status, header, body); p != nil && p.Type == ProblemTypePrefix+p.Code {
		return p.Code
	}
	return ""
}

// maxRetryAfter bounds what a Retry-After is read as, so that a huge one cannot overflow a
// time.Duration; any wait that long ends past every deadline anyway.
const maxRetryAfter = 365 * 24 * time.Hour

// ParseRetryAfter reads a Retry-After value (RFC 9110): whole seconds, or an HTTP-date, which
// is measured from now (a date in the past is 0). ok is false when v is empty or malformed (a
// negative or fractional number, text); the value is then 0 and the backoff decides the wait.
// Values are capped at a year.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
				return maxRetryAfter, true
			}
			return 0, false
		}
		if n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// DecodeError is the [*Error] of an answer with an error status: its RFC 9457 problem decoded
// when it is one, with the code the Idempotency-Refusal header names ([HeaderRefusal]) when it
// names one, whatever the body's format; else just the status and its text.
func DecodeError(status int, header http.Header, body []byte) *Error {
	e := DecodeProblem(status, header, body)
	if e == nil {
		e = &Error{Status: status, Title: http.StatusText(status)}
	}
	if code := idemwire.RefusalCode(header); code != "" && code != e.Code {
		// The body is the API's own format: the code is the runtime's all the same.
		e.Code, e.Type = code, idemwire.ProblemType(code)
	}
	return e
}

// DecodeProblem reads an application/problem+json body (RFC 9457) into an [*Error], or returns
// nil when the answer is not one.
func DecodeProblem(status int, header http.Header, body []byte) *Error {
	mt, _, err := mime.ParseMediaType(header.Get("Content-Type"))
	if err != nil || mt != idemwire.MediaTypeProblem {
		return nil
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &p) != nil {
		return nil
	}
	// The answer's status is the one that counts; the body's may disagree only by mistake.
	return &Error{Status: status, Type: p.Type, Title: p.Title, Detail: p.Detail, Code: p.Code}
}
