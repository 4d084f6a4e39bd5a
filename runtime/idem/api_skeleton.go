package idem

// This file is the agreed API surface, written before the implementation. Implementations move
// out of here into their own files (store.go, claim.go, http.go, …); when it is empty, delete it.

import (
	"context"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

// PurgeOpts tune Purge; nil means defaults.
type PurgeOpts struct {
	BatchSize int                      // rows per DELETE; default 1000
	DryRun    bool                     // count only
	Progress  func(deletedSoFar int64) // called after each batch
}

// PurgeResult counts what Purge did.
type PurgeResult struct {
	Deleted int64
	Batches int
}

// Purge deletes expired completed keys (and in-flight rows whose lease and TTL are both long
// gone) in batches until none is left or ctx ends.
func (s *Store) Purge(ctx context.Context, opts *PurgeOpts) (*PurgeResult, error) {
	panic("unimplemented")
}

// ---- Do: the plain API for non-HTTP callers ----

// DoParams identify a unit of work.
type DoParams struct {
	Scope       string
	Key         string
	Operation   string
	Fingerprint string
	Lease       time.Duration // default 60s
	TTL         time.Duration // default 24h
	Transaction bool          // claim inside the business transaction (claim: transaction)
	Wait        time.Duration
}

// DoResult says whether fn ran and what the outcome is.
type DoResult struct {
	Outcome  *Outcome
	Replayed bool
}

// Do runs fn at most once per key: it claims, runs fn in a transaction, completes and commits;
// a completed key returns its stored outcome with Replayed set. ErrInProgress,
// ErrFingerprintMismatch and ErrStoreUnavailable say why fn did not run. An error from fn rolls
// back and releases the key.
func (s *Store) Do(ctx context.Context, p *DoParams, fn func(ctx context.Context, tx pgx.Tx) (*Outcome, error)) (*DoResult, error) {
	panic("unimplemented")
}

// ---- HTTP: what generated code calls ----

// Storage is what a policy stores.
type Storage int

const (
	StorageResponse  Storage = iota + 1 // status, allow-listed headers, body
	StorageReference                    // status + reference, replay reloads the resource
	StorageMarker                       // status only, replay recomputes
)

// ClaimMode is when the claim is made.
type ClaimMode int

const (
	ClaimModeLease       ClaimMode = iota + 1 // claim commits at once; duplicates get 409
	ClaimModeTransaction                      // claim inside the business transaction; duplicates wait
)

// KeyRule says where a key comes from and what a valid one looks like.
type KeyRule struct {
	Header    string // e.g. "Idempotency-Key"; empty when the key is a path parameter
	Required  bool
	MaxLength int            // default 255
	Pattern   *regexp.Regexp // optional
}

// Policy is one operation's resolved x-idempotency, emitted by the generator as a literal.
type Policy struct {
	Operation      string // operationId as written in the spec
	Route          string // "POST /v1/payments"
	Storage        Storage
	Claim          ClaimMode
	TTL            time.Duration
	Lease          time.Duration
	Wait           time.Duration
	MismatchStatus int       // 422 default; 409 or 400 allowed
	Persist        StatusSet // which statuses are stored
	Key            KeyRule
	ScopeTenant    bool     // scope includes the tenant (Config.Tenant)
	ReplayHeaders  []string // added to the default replay allow-list
}

// StatusSet is a set of HTTP statuses written as classes ("2xx") or codes ("404").
// 408, 425 and 429 are never members.
type StatusSet struct { /* implementation-defined */
}

// Statuses builds a StatusSet; it panics on a malformed item (generated code is validated).
func Statuses(items ...string) StatusSet { panic("unimplemented") }

// Contains reports whether status is in the set.
func (s StatusSet) Contains(status int) bool { panic("unimplemented") }

// ScopePart is one element of a key's scope besides the tenant (operation, header:X, path:p).
type ScopePart struct {
	Name  string // "operation", "header:X-Account", "path:cart_id"
	Value string
}

// Request is one HTTP request as the generated adapter sees it.
type Request struct {
	// KeyValues are the raw values of the key header (nil when absent), or the path value.
	KeyValues []string
	Scope     []ScopePart
	// Fingerprint is the canonical request hash (see Fingerprint).
	Fingerprint string
}

// HandlerFunc runs the business handler inside tx and returns what it answered (recorded with a
// Recorder) — for reference storage Outcome.Reference must be set.
type HandlerFunc func(ctx context.Context, tx pgx.Tx) (*Outcome, error)

// ResultKind says what Serve decided.
type ResultKind int

const (
	ResultExecuted ResultKind = iota + 1 // the handler ran now; Outcome is its answer
	ResultReplayed                       // a stored outcome; reference/marker replays call Replay<Op>
	ResultProblem                        // Problem says why the handler did not run
)

// Result is what Serve returns for the adapter to write.
type Result struct {
	Kind    ResultKind
	Outcome *Outcome
	Problem *Problem
}

// Serve is the whole idempotent request: validate the key, build the scope (tenant first), claim,
// run fn in a transaction with lease renewal, complete + commit (or roll back + release when fn
// fails, panics, the context ends or the status is not persisted), and map every other case to a
// Problem. Store outages give a 503 Problem; fn never runs without a claim.
// The returned error is fn's own error (after the key has been released).
func (s *Store) Serve(ctx context.Context, p *Policy, req *Request, fn HandlerFunc) (*Result, error) {
	panic("unimplemented")
}

// WriteTo writes the result: the outcome (with Idempotent-Replayed: true on replays, only
// allow-listed headers) or the problem.
func (r *Result) WriteTo(w http.ResponseWriter) error { panic("unimplemented") }

// Problem is an RFC 9457 problem detail with a stable code.
type Problem struct {
	Type       string        `json:"type"`
	Title      string        `json:"title"`
	Status     int           `json:"status"`
	Detail     string        `json:"detail,omitempty"`
	Code       string        `json:"code"`
	RetryAfter time.Duration `json:"-"`
}

// Problem codes.
const (
	CodeKeyMissing       = "key-missing"
	CodeKeyInvalid       = "key-invalid"
	CodeKeyReused        = "key-reused"
	CodeInProgress       = "in-progress"
	CodeStoreUnavailable = "store-unavailable"
)

// WriteTo writes p as application/problem+json with Cache-Control: no-store and Retry-After.
func (p *Problem) WriteTo(w http.ResponseWriter) error { panic("unimplemented") }

// ParseKey validates the key header values per rule (RFC 8941 quoted form accepted, exactly one
// header, printable ASCII, length, pattern). A nil Problem means key is valid; key == "" with a
// nil Problem means absent and not required.
func ParseKey(values []string, rule KeyRule) (key string, p *Problem) { panic("unimplemented") }

// Recorder is an http.ResponseWriter that captures a handler's response for storing.
type Recorder struct { /* implementation-defined */
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { panic("unimplemented") }

// Outcome returns what was written (status 200 if WriteHeader was never called).
func (r *Recorder) Outcome() *Outcome { panic("unimplemented") }

// Fingerprinter builds the canonical fingerprint of a request: the route, then named parts in
// the order the generated code adds them, then the body as canonical JSON (sorted keys, no
// insignificant whitespace) minus excluded JSON pointers.
type Fingerprinter struct { /* implementation-defined */
}

// NewFingerprinter starts a fingerprint for route ("POST /v1/payments").
func NewFingerprinter(route string) *Fingerprinter { panic("unimplemented") }

// Add adds a named part (path:id, query:x, header:X-Foo); v is JSON-encoded canonically.
func (f *Fingerprinter) Add(name string, v any) error { panic("unimplemented") }

// Body adds the typed request body (JSON or form) with the excluded JSON pointers removed.
func (f *Fingerprinter) Body(v any, exclude ...string) error { panic("unimplemented") }

// Sum returns the hex SHA-256.
func (f *Fingerprinter) Sum() string { panic("unimplemented") }

// ScopeString renders tenant and parts into the canonical scope stored in the table.
func ScopeString(tenant string, parts []ScopePart) string { panic("unimplemented") }

// ClaimFromContext returns the claim that Serve or Do holds for the handler running with ctx:
// handlers use Claim.Key (the normalised key, quotes removed) to derive stable resource ids.
func ClaimFromContext(ctx context.Context) (*Claim, bool) { panic("unimplemented") }
