package idem

// This file is the agreed API surface, written before the implementation. Implementations move
// out of here into their own files (store.go, claim.go, http.go, …); when it is empty, delete it.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the store needs from a pool: *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Sentinel errors. Wrapped errors keep them reachable through errors.Is.
var (
	// ErrLeaseLost: the claim's lease expired and another request took the key over; the caller's
	// business transaction must roll back.
	ErrLeaseLost = errors.New("idem: lease lost to another request")
	// ErrStoreUnavailable: the key store could not be reached; no handler ran (fail closed).
	ErrStoreUnavailable = errors.New("idem: key store unavailable")
	// ErrInProgress: (Do) the key is held by a request still in flight.
	ErrInProgress = errors.New("idem: request with this key is in progress")
	// ErrFingerprintMismatch: the key was used before with a different request.
	ErrFingerprintMismatch = errors.New("idem: key reused with a different request")
	// ErrBodyTooLarge: an outcome's body is over Config.MaxStoredBody.
	ErrBodyTooLarge = errors.New("idem: response body too large to store")
)

// Config configures a Store. The zero value of every field means its default.
type Config struct {
	// Schema and Table name the key table; defaults "public" and "idempotency_keys".
	Schema string
	Table  string
	// Tenant returns the tenant of a request, for policies whose scope includes "tenant".
	// Called after authentication (it reads what middleware put in ctx). An error is answered
	// like the handler's own error; an empty tenant is allowed only when Tenant is nil.
	Tenant func(ctx context.Context) (string, error)
	// Logger receives structured logs; keys are logged only as hashes. Default: discard.
	Logger *slog.Logger
	// Observer, when set, is called for every event (claimed, replayed, …) for metrics.
	Observer func(ctx context.Context, e Event)
	// MaxStoredBody caps a stored response body in bytes; default 1 MiB.
	MaxStoredBody int
}

// EventKind names what happened to a key.
type EventKind string

const (
	EventClaimed    EventKind = "claimed"
	EventTakeover   EventKind = "takeover"
	EventReplayed   EventKind = "replayed"
	EventInProgress EventKind = "in_progress"
	EventMismatch   EventKind = "mismatch"
	EventCompleted  EventKind = "completed"
	EventLeaseLost  EventKind = "lease_lost"
	EventReleased   EventKind = "released"
	EventPurged     EventKind = "purged"
	EventStoreError EventKind = "store_error"
)

// Event is passed to Config.Observer.
type Event struct {
	Kind      EventKind
	Operation string
	KeyHash   string        // hex SHA-256 prefix of scope+key; never the raw key
	Duration  time.Duration // handler time for EventCompleted/EventReleased
	Count     int           // rows for EventPurged
}

// Store is the runtime: it owns the key table and runs claims, completions and replays.
type Store struct {
	db  DB
	cfg Config
}

// NewStore returns a Store on db. cfg may be nil.
func NewStore(db DB, cfg *Config) (*Store, error) { panic("unimplemented") }

// ---- migrations ----

// MigrateOpts names where the table lives; nil means the defaults.
type MigrateOpts struct {
	Schema string
	Table  string
}

// Migration is one numbered, embedded SQL migration, rendered for a schema and table.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Migrations returns the migrations rendered for opts, in version order.
func Migrations(opts *MigrateOpts) ([]Migration, error) { panic("unimplemented") }

// MigrateResult tells which versions were applied by this call.
type MigrateResult struct{ Applied []int }

// Migrate applies the migrations not yet applied, in a transaction under an advisory lock;
// running it again is a no-op.
func Migrate(ctx context.Context, db DB, opts *MigrateOpts) (*MigrateResult, error) {
	panic("unimplemented")
}

// ---- claims (low level) ----

// ClaimParams identify a request.
type ClaimParams struct {
	Scope       string // canonical scope, see ScopeString
	Key         string // the validated idempotency key
	Operation   string // operation id
	Fingerprint string // hex SHA-256 of the canonical request, see Fingerprint
	Lease       time.Duration
	TTL         time.Duration
}

// ClaimStatus is the outcome of a claim.
type ClaimStatus int

const (
	ClaimAcquired   ClaimStatus = iota + 1 // new key: the caller executes
	ClaimTakenOver                         // the previous holder's lease expired: the caller executes
	ClaimReplay                            // completed before: Outcome holds what to answer
	ClaimInProgress                        // held by a live lease: RetryAfter says for how long
	ClaimMismatch                          // same key, different fingerprint (checked first)
)

// Claim is a held key; its Token fences completion and release.
type Claim struct {
	Scope     string
	Key       string
	Operation string
	Token     string
	Attempt   int
	Lease     time.Duration
}

// Outcome is what a completed request answered.
type Outcome struct {
	Status    int
	Header    http.Header // response storage: allow-listed headers only
	Body      []byte      // response storage only
	Reference string      // reference storage only
}

// ClaimResult is what Claim returns.
type ClaimResult struct {
	Status     ClaimStatus
	Claim      *Claim        // ClaimAcquired, ClaimTakenOver
	Outcome    *Outcome      // ClaimReplay
	RetryAfter time.Duration // ClaimInProgress: time left on the lease, at least 1s
}

// Claim claims p.Key in one statement and commits at once (claim: lease).
func (s *Store) Claim(ctx context.Context, p *ClaimParams) (*ClaimResult, error) {
	panic("unimplemented")
}

// ClaimTxOpts tune ClaimTx.
type ClaimTxOpts struct {
	// Wait bounds how long the claim waits for a concurrent holder's transaction to end.
	Wait time.Duration
}

// ClaimTx claims inside the caller's transaction (claim: transaction). A concurrent duplicate
// waits (bounded by opts.Wait) for the first transaction to end, then replays or claims.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p *ClaimParams, opts *ClaimTxOpts) (*ClaimResult, error) {
	panic("unimplemented")
}

// CompleteTx stores o for c inside tx. If tx is rolled back, the completion is as well.
// ErrLeaseLost means another request took the key over: tx must roll back.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, c *Claim, o *Outcome, ttl time.Duration) error {
	panic("unimplemented")
}

// Release deletes c's row if c still owns it, so a retry executes anew.
func (s *Store) Release(ctx context.Context, c *Claim) error { panic("unimplemented") }

// Renew extends c's lease by lease from now (database clock); ErrLeaseLost if not owned.
func (s *Store) Renew(ctx context.Context, c *Claim, lease time.Duration) error {
	panic("unimplemented")
}

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
