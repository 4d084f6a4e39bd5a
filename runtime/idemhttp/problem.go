package idemhttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Problem is an RFC 9457 problem detail with a stable code.
type Problem struct {
	Type       string        `json:"type"`
	Title      string        `json:"title"`
	Status     int           `json:"status"`
	Detail     string        `json:"detail,omitempty"`
	Code       string        `json:"code"`
	RetryAfter time.Duration `json:"-"`
}

// Problem codes. Each has the stable type URI ProblemTypePrefix + code.
const (
	CodeKeyMissing       = "key-missing"
	CodeKeyInvalid       = "key-invalid"
	CodeKeyReused        = "key-reused"
	CodeInProgress       = "in-progress"
	CodeStoreUnavailable = "store-unavailable"
)

// ProblemTypePrefix begins every problem type URI.
const ProblemTypePrefix = "urn:idemgen:problem:"

// problemTitles is the one table of titles, keyed by code. A problem type has one title whoever
// writes it: RFC 9457 clients may show the title as the type's summary, so two titles for one
// type would read as two different problems.
var problemTitles = map[string]string{
	CodeKeyMissing:       "Idempotency key missing",
	CodeKeyInvalid:       "Idempotency key invalid",
	CodeKeyReused:        "Idempotency key reused with a different request",
	CodeInProgress:       "Request with this idempotency key in progress",
	CodeStoreUnavailable: "Idempotency store unavailable",
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
	p.RetryAfter = retryAfter(retry)
	return p
}

func problemUnavailable(retry time.Duration) *Problem {
	p := newProblem(http.StatusServiceUnavailable, CodeStoreUnavailable,
		"the idempotency store cannot be reached, so the request was not processed: retry after the Retry-After delay with the same key")
	p.RetryAfter = retryAfter(retry)
	return p
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
		h.Set("Retry-After", strconv.FormatInt(int64(retryAfter(p.RetryAfter)/time.Second), 10))
	}
	w.WriteHeader(p.Status)
	_, err = w.Write(body)
	return err
}

// Error makes a Problem usable as an error, e.g. by adapters that return it.
func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// retryAfter rounds d up to whole seconds, at least one: what a Retry-After header can say.
func retryAfter(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second, 1) * time.Second
}
