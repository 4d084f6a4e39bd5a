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
	"github.com/idemgen/idemgen/runtime/idemwire"
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

// Problem codes, as runtime/idemwire defines them (which also has their titles, statuses and
// what a retry can do). Each has the stable type URI ProblemTypePrefix + code. A code added
// later is idemwire's only.
const (
	CodeKeyMissing           = idemwire.CodeKeyMissing
	CodeKeyInvalid           = idemwire.CodeKeyInvalid
	CodeKeyReused            = idemwire.CodeKeyReused
	CodeInProgress           = idemwire.CodeInProgress
	CodeStoreUnavailable     = idemwire.CodeStoreUnavailable
	CodeBodyInvalid          = idemwire.CodeBodyInvalid
	CodeBodyTooLarge         = idemwire.CodeBodyTooLarge
	CodeRequestInvalid       = idemwire.CodeRequestInvalid
	CodeHandlerTimeout       = idemwire.CodeHandlerTimeout
	CodeMediaTypeUnsupported = idemwire.CodeMediaTypeUnsupported
	CodeOperationUncertain   = idemwire.CodeOperationUncertain
	CodeNotFound             = idemwire.CodeNotFound
	CodeMethodNotAllowed     = idemwire.CodeMethodNotAllowed
	CodeInternal             = idemwire.CodeInternal
	CodeNotImplemented       = idemwire.CodeNotImplemented
	CodeSignatureInvalid     = idemwire.CodeSignatureInvalid
)

// ProblemTypePrefix begins every problem type URI.
const ProblemTypePrefix = idemwire.ProblemTypePrefix

// ProblemCodes returns every code the runtime answers problems with, in the order documentation
// lists them (idemwire's table). idemgen annotate documents the codes from it, and idemgen lint
// finds the statuses an operation shares with the runtime from ProblemStatus, so a spec's problem
// schema cannot fall behind what the runtime answers.
func ProblemCodes() []string { return idemwire.ProblemCodes() }

// ProblemStatus returns the status the runtime answers code with: 0 for key-reused, whose status
// is the operation's mismatchStatus (422 by default), and -1 for a code the runtime does not
// define. not-found and method-not-allowed answer requests that reach no operation.
func ProblemStatus(code string) int { return idemwire.ProblemStatus(code) }

// ProblemTitle returns the title of the runtime's problem code, or "" for a code the runtime
// does not define.
func ProblemTitle(code string) string { return idemwire.ProblemTitle(code) }

// NewProblem returns a problem of one of the runtime's codes, with the code's type URI and title,
// for an application that answers a case the runtime also answers (a key that made a resource
// before its record expired is key-reused too): status and detail are the caller's. It panics
// on a code the runtime does not define, as that is a programming error: give your own problems
// your own type URI and title.
func NewProblem(status int, code, detail string) *Problem {
	if idemwire.ProblemTitle(code) == "" {
		panic(fmt.Sprintf("idemhttp: NewProblem: %q is not one of the runtime's problem codes (use your own type URI and title for your own problems)", code))
	}
	return newProblem(status, code, detail)
}

func newProblem(status int, code, detail string) *Problem {
	return &Problem{Type: idemwire.ProblemType(code), Title: idemwire.ProblemTitle(code), Status: status, Detail: detail, Code: code}
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

// HeaderRefusal is set on every problem the runtime answers, to its code, whatever the body's
// format (idemwire.HeaderRefusal): a client learns what a retry can do from it alone.
const HeaderRefusal = idemwire.HeaderRefusal

// WriteTo writes p as application/problem+json with Cache-Control: no-store, Idempotency-Refusal
// naming p's code when it is one of the runtime's ([HeaderRefusal]) and, when p.RetryAfter is
// set, Retry-After in whole seconds (at least 1).
func (p *Problem) WriteTo(w http.ResponseWriter) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", idemwire.MediaTypeProblem)
	setRefusal(h, p)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(idem.RoundRetryAfter(p.RetryAfter)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
}

// setRefusal sets h's Idempotency-Refusal to p's code when it is one of the runtime's, and
// removes one set before otherwise: a problem of the application's own code says nothing a
// client could act on.
func setRefusal(h http.Header, p *Problem) {
	if idemwire.ProblemTitle(p.Code) != "" {
		h.Set(HeaderRefusal, p.Code)
	} else {
		h.Del(HeaderRefusal)
	}
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
