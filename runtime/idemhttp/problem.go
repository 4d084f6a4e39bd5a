package idemhttp

import (
	"encoding/json"
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
	// CodeBodyInvalid: the request body is not what its media type says (invalid JSON, data
	// after the JSON value, a duplicate member); answered before any key is claimed.
	CodeBodyInvalid = "body-invalid"
	// CodeBodyTooLarge: the request body is over the API's limit (413).
	CodeBodyTooLarge = "body-too-large"
)

// ProblemTypePrefix begins every problem type URI.
const ProblemTypePrefix = "urn:idemgen:problem:"

var problemTitles = map[string]string{
	CodeKeyMissing:       "Idempotency key missing",
	CodeKeyInvalid:       "Idempotency key invalid",
	CodeKeyReused:        "Idempotency key reused with a different request",
	CodeInProgress:       "Request with this idempotency key in progress",
	CodeStoreUnavailable: "Idempotency store unavailable",
	CodeBodyInvalid:      "Request body invalid",
	CodeBodyTooLarge:     "Request body too large",
	CodeRequestInvalid:   "Request invalid",
	CodeNotFound:         "Not found",
	CodeMethodNotAllowed: "Method not allowed",
	CodeInternal:         "Internal error",
}

// NewProblem returns the runtime's problem for code (one of the Code… constants): its type,
// its one title, and detail. An application that answers with one of these codes itself (a
// validation failure as request-invalid, say) uses it, so each problem type has one title.
func NewProblem(status int, code, detail string) *Problem { return newProblem(status, code, detail) }

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
