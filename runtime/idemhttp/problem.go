package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Problem is an RFC 9457 problem detail with a stable code.
type Problem struct {
	Type       string        `json:"type"`
	Title      string        `json:"title"`
	Status     int           `json:"status"`
	Detail     string        `json:"detail,omitempty"`
	Code       string        `json:"code"`
	RetryAfter time.Duration `json:"-"`

	// Errors lists, for a body refused by request validation (runtime/idemopenapi), each place
	// it went wrong, as RFC 9457's example of a validation problem does.
	Errors []ProblemError `json:"errors,omitempty"`
}

// ProblemError is one place a request went wrong: Pointer is a JSON Pointer into the body as
// sent, as a URI fragment ("#/item"), and Detail the reason, in the schema's words.
type ProblemError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

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
	// CodeHandlerTimeout: the handler ran past the operation's timeout (Policy.Timeout, by
	// default the lease); its work was rolled back and the key released, so a retry runs anew: 503.
	CodeHandlerTimeout = "handler-timeout"
	// CodeMediaTypeUnsupported: the body was sent with a Content-Type the operation does not
	// declare (or none): 415, before any claim.
	CodeMediaTypeUnsupported = "media-type-unsupported"
	// CodeOperationUncertain: an earlier attempt with this key was lost after it called a
	// provider (x-idempotency uncertainOnLoss), so whether the provider acted is unknown; the key
	// waits for an operator or a reconciliation to settle it: 409 without Retry-After, final for
	// clients (idem.ErrUncertain).
	CodeOperationUncertain = "operation-uncertain"
)

// ProblemTypePrefix begins every problem type URI.
const ProblemTypePrefix = "urn:idemgen:problem:"

// problemTable is the one table of the runtime's problem codes, their titles and the status each
// is answered with, in the order documentation lists them. A problem type has one title whoever
// writes it: RFC 9457 clients may show the title as the type's summary, so two titles for one
// type would read as two different problems. idemgen annotate documents the codes from it
// (ProblemCodes), and idemgen lint finds the statuses an operation shares with the runtime from
// it (ProblemStatus), so a spec's problem schema cannot fall behind what the runtime answers.
var problemTable = []struct {
	code, title string
	status      int // 0: the operation's mismatchStatus
}{
	{CodeKeyMissing, "Idempotency key missing", http.StatusBadRequest},
	{CodeKeyInvalid, "Idempotency key invalid", http.StatusBadRequest},
	{CodeKeyReused, "Idempotency key reused with a different request", 0},
	{CodeInProgress, "Request with this idempotency key in progress", http.StatusConflict},
	{CodeStoreUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable},
	{CodeBodyInvalid, "Request body invalid", http.StatusBadRequest},
	{CodeBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge},
	{CodeRequestInvalid, "Request invalid", http.StatusBadRequest},
	{CodeNotFound, "Not found", http.StatusNotFound},
	{CodeMethodNotAllowed, "Method not allowed", http.StatusMethodNotAllowed},
	{CodeInternal, "Internal error", http.StatusInternalServerError},
	{CodeHandlerTimeout, "Request processing timed out", http.StatusServiceUnavailable},
	{CodeMediaTypeUnsupported, "Media type unsupported", http.StatusUnsupportedMediaType},
	{CodeNotImplemented, "Not implemented", http.StatusNotImplemented},
	{CodeOperationUncertain, "The outcome of an earlier attempt is uncertain", http.StatusConflict},
}

var problemTitles = func() map[string]string {
	m := make(map[string]string, len(problemTable))
	for _, p := range problemTable {
		m[p.code] = p.title
	}
	return m
}()

// ProblemCodes returns every code the runtime answers problems with, in the table's order.
func ProblemCodes() []string {
	codes := make([]string, len(problemTable))
	for i, p := range problemTable {
		codes[i] = p.code
	}
	return codes
}

// ProblemStatus returns the status the runtime answers code with: 0 for key-reused, whose status
// is the operation's mismatchStatus (422 by default), and -1 for a code the runtime does not
// define. not-found and method-not-allowed answer requests that reach no operation.
func ProblemStatus(code string) int {
	for _, p := range problemTable {
		if p.code == code {
			return p.status
		}
	}
	return -1
}

// ProblemTitle returns the title of the runtime's problem code, or "" for a code the runtime
// does not define.
func ProblemTitle(code string) string { return problemTitles[code] }

// NewProblem returns a problem of one of the runtime's codes, with the code's type URI and title,
// for an application that answers a case the runtime also answers (a key that made a resource
// before its record expired is key-reused too): status and detail are the caller's. It panics
// on a code the runtime does not define, as that is a programming error: give your own problems
// your own type URI and title.
func NewProblem(status int, code, detail string) *Problem {
	if _, ok := problemTitles[code]; !ok {
		panic(fmt.Sprintf("idemhttp: NewProblem: %q is not one of the runtime's problem codes (use your own type URI and title for your own problems)", code))
	}
	return newProblem(status, code, detail)
}

func newProblem(status int, code, detail string) *Problem {
	return &Problem{Type: ProblemTypePrefix + code, Title: problemTitles[code], Status: status, Detail: detail, Code: code}
}

func problemKeyReused(status int) *Problem {
	return newProblem(status, CodeKeyReused,
		"this idempotency key was already used for a different request (method, path, parameters or body differ): use a new key for a new request, or resend the original request unchanged")
}

func problemInProgress(retry time.Duration) *Problem {
	p := newProblem(http.StatusConflict, CodeInProgress,
		"a request with this idempotency key is still being processed: retry after the Retry-After delay with the same key to get its outcome")
	p.RetryAfter = idem.RoundRetryAfter(retry)
	return p
}

func problemUnavailable(retry time.Duration) *Problem {
	p := newProblem(http.StatusServiceUnavailable, CodeStoreUnavailable,
		"the idempotency store cannot be reached, so the request was not processed: retry after the Retry-After delay with the same key")
	p.RetryAfter = idem.RoundRetryAfter(retry)
	return p
}

func problemHandlerTimeout() *Problem {
	// No Retry-After: nothing says a retry would be faster, and the key is free for one now.
	return newProblem(http.StatusServiceUnavailable, CodeHandlerTimeout,
		"the request took longer than this operation allows, so its work was rolled back and nothing of it was kept: retry with the same key to run it again")
}

func problemUncertain() *Problem {
	// No Retry-After: no retry can settle the key, only the provider's records can.
	return newProblem(http.StatusConflict, CodeOperationUncertain,
		"an earlier attempt with this idempotency key was interrupted after it called a provider, so whether it took effect is not known yet: an operator or a reconciliation with the provider's records will settle it, and retrying will not help (the key then answers with the outcome, or runs anew if the attempt took no effect); do not retry with a new key, which could do it twice")
}

// WriteTo writes p as application/problem+json with Cache-Control: no-store and, when
// p.RetryAfter is set, Retry-After in whole seconds (at least 1).
func (p *Problem) WriteTo(w http.ResponseWriter) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(idem.RoundRetryAfter(p.RetryAfter)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
}

// Error makes a Problem usable as an error, e.g. by adapters that return it.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// ErrorProblem classifies an error a handler returned, for the error handler of a generated
// server (oapi-codegen's ResponseErrorHandlerFunc), so that operations that are not idempotent
// answer like idempotent ones:
//
//   - a store outage (idem.IsStoreUnavailable: a lost or refused database connection, a closed
//     pool, SQLSTATE classes 08 and 53, 57P01..57P03) is the 503 store-unavailable problem;
//   - a value PostgreSQL text cannot hold, refused by the handler's own statement (SQLSTATE 22021
//     invalid byte sequence, 22P05 untranslatable character, such as a %00 in a path parameter),
//     is the 400 request-invalid problem;
//   - idem.ErrUncertain (the key's earlier attempt was lost after a provider call) is the 409
//     operation-uncertain problem;
//   - a *Problem returned as an error is itself.
//
// Anything else, and a cancelled context (the client went away), is nil: the application's own
// answer (oapi-codegen's default is a 500).
func ErrorProblem(err error) *Problem {
	var p *Problem
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return nil
	case errors.As(err, &p):
		return p
	case errors.Is(err, idem.ErrUncertain): // before the failure it may wrap (a timeout)
		return problemUncertain()
	case errors.Is(err, idem.ErrHandlerTimeout):
		return problemHandlerTimeout()
	}
	if prob := textErrorProblem(err); prob != nil {
		return prob
	}
	if idem.IsStoreUnavailable(err) {
		return problemUnavailable(idem.DefaultUnavailableRetryAfter)
	}
	return nil
}

// textErrorProblem is the request-invalid problem for a statement that PostgreSQL refused because
// a value was not text it can hold, or nil.
func textErrorProblem(err error) *Problem {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "22021" && pgErr.Code != "22P05") {
		return nil
	}
	// PostgreSQL's own message names the encoding and the bytes; it stays in the log.
	return newProblem(http.StatusBadRequest, CodeRequestInvalid,
		"a value of the request could not be stored as text: send parameters and body as UTF-8 text without NUL bytes (%00 and bytes such as %FF in a URL decode to these)")
}
