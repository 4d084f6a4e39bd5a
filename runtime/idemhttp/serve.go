package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"reflect"
	"runtime/debug"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Storage is what a policy stores of an answer: x-idempotency's storage field.
type Storage int

const (
	StorageResponse  Storage = iota + 1 // status, allow-listed headers and body, replayed byte for byte
	StorageReference                    // status and a resource reference; a replay reloads the resource
	StorageMarker                       // status only; a replay recomputes the answer
)

// Policy is one operation's x-idempotency with every default applied, as generated code writes
// it. A zero field means its default: response storage, lease claims, idem.DefaultTTL and
// idem.DefaultLease, mismatch status 422, persist 2xx/3xx/4xx, key header Idempotency-Key.
type Policy struct {
	Operation      string // operationId as written in the spec
	Route          string // "POST /v1/payments"
	Storage        Storage
	Claim          idem.ClaimMode
	TTL            time.Duration
	Lease          time.Duration
	Wait           time.Duration
	Timeout        time.Duration  // bounds the handler (idem.DoParams.Timeout), 0: the lease; past it, 503 handler-timeout
	MismatchStatus int            // 422 by default; 409 or 400 allowed
	Persist        idem.StatusSet // which statuses are stored
	Key            KeyRule
	// ScopeTenant puts the request's tenant (idem.Config.Tenant) in the key's scope; the scope's
	// other parts are the operation's (Op.Scope).
	ScopeTenant bool
	// Exclude lists JSON pointers left out of the body's fingerprint.
	Exclude []string
	// Body says the operation declares a request body. Its bytes as sent are fingerprinted
	// (see Capture), so Handle refuses to run without them.
	Body bool
	// NoFingerprint (x-idempotency fingerprint: false) fingerprints the route alone.
	NoFingerprint bool
	// BodyTypes are the media types the operation declares for its body ("application/json",
	// "image/*"). A body sent as another one, or without a Content-Type, is answered 415 before
	// any claim: it would be decoded as one type and fingerprinted as another.
	BodyTypes []string
	// DeclaredHeaders are the response headers the spec declares on the statuses the policy
	// stores (responses.<status>.headers); ReplayHeaders (x-idempotency replayHeaders) are
	// others the handler sets. A stored answer keeps both for its replays, besides the default
	// allow-list (Content-Type, Content-Language, Location, ETag, Last-Modified, Link), and
	// never a header [NeverReplayed] names, whichever list has it.
	DeclaredHeaders []string
	ReplayHeaders   []string
	// EchoHeaders (x-idempotency echoHeaders) are response headers that must be the current
	// request's, not the first one's: FAPI's x-fapi-interaction-id. A replay takes each from the
	// request's header of the same name, never from the stored answer (when the request has none,
	// the replay keeps what middleware set, else goes without it), and so does every refusal of
	// the operation ([Render]).
	EchoHeaders []string
	// ValidateBody, when set, checks the body as sent against the operation's schema before
	// anything is claimed (runtime/idemopenapi makes one from the spec). A Problem it returns is
	// the answer (400 request-invalid, naming the field): an invalid request never binds a key.
	ValidateBody func(ctx context.Context, contentType string, body []byte) *Problem
	// Edge, set by generated code, lets the body capture ([CaptureWith]) answer a retry of a
	// completed key before routing, binding and validation: see [EdgeRule]. Nil sends every
	// request down the whole stack.
	Edge *EdgeRule
	// History (x-idempotency history) keeps the durable history of the operation's keys
	// (idem.DoParams.History).
	History bool
	// UncertainOnLoss (x-idempotency uncertainOnLoss) turns a key uncertain when its claim is
	// lost after the handler asked for a provider key (idem.DoParams.UncertainOnLoss; it implies
	// History and needs lease claims, which Check verifies). Retries of an uncertain key are
	// answered 409 operation-uncertain until it is settled.
	UncertainOnLoss bool
}

// doParams are the claim's params for a request of p's operation: one place, so the claim the
// edge makes ahead (edge.go) and the handler's own are made alike.
func (p *Policy) doParams(tenant string, scope []ScopePart, key, fingerprint string) *idem.DoParams {
	return &idem.DoParams{
		Tenant: tenant, Scope: scopeString(tenant, scope), Key: key, AllowNoKey: true,
		Operation: p.Operation, Fingerprint: fingerprint,
		Lease: p.Lease, TTL: p.TTL, Claim: p.Claim, Wait: p.Wait, Persist: p.persist(),
		Timeout: p.Timeout, History: p.History, UncertainOnLoss: p.UncertainOnLoss,
	}
}

func (p *Policy) persist() idem.StatusSet {
	if p.Persist.IsEmpty() {
		return defaultPersist
	}
	return p.Persist
}

// Defaults of a zero Policy field.
const (
	DefaultMismatchStatus = http.StatusUnprocessableEntity
	DefaultKeyHeader      = "Idempotency-Key"
)

// DefaultPersist are the statuses stored when Policy.Persist is empty: successes, redirects and
// client errors (never 408, 425 or 429, which idem.Statuses leaves out).
var DefaultPersist = idemwire.DefaultPersist

var defaultPersist = idem.Statuses(DefaultPersist...)

func (p *Policy) mismatchStatus() int {
	if p.MismatchStatus == 0 {
		return DefaultMismatchStatus
	}
	return p.MismatchStatus
}

// Request is one HTTP request as the runtime sees it.
type Request struct {
	// KeyValues are the raw values of the key header (nil when absent), or the path value.
	KeyValues []string
	// Scope are the scope's parts besides the tenant.
	Scope []ScopePart
	// Fingerprint is the canonical request digest (see idem.Fingerprinter).
	Fingerprint string

	// Room for the usual KeyValues (one value) and Scope (a part or two), for Handle's request,
	// so that they need no allocations of their own.
	key   [1]string
	scope [2]ScopePart
}

// ResultKind says what Serve decided.
type ResultKind int

const (
	ResultExecuted ResultKind = iota + 1 // the handler ran now; Outcome is its answer
	ResultReplayed                       // a stored (or, for reference and marker storage, recomputed) outcome
	ResultProblem                        // Problem says why the handler did not run
)

// Result is what Serve decided, ready to be written with WriteTo.
type Result struct {
	Kind    ResultKind
	Outcome *idem.Outcome
	Problem *Problem
	// Persisted (ResultExecuted) says whether the outcome was committed for replay; false when
	// its status is outside the policy's persist set or the request had no key.
	Persisted bool

	// declared and allow are the policy's DeclaredHeaders and ReplayHeaders, for WriteTo.
	declared, allow []string
	recomputed      bool // a replay answered anew by Replay<Op>: its headers are its own
	// echo are the policy's EchoHeaders and req the request Handle served as the capture saw it
	// (nil when it was not captured), whose headers a replay echoes; log writes a problem through
	// the server's renderer (CaptureWith), for op, with the request's context ctx.
	echo []string
	req  *http.Request
	ctx  context.Context
	log  *refusalLog
	op   *Policy
}

// ErrNoReference: a reference-storage handler answered 2xx without a reference, so a replay
// could not reload the resource; the work was rolled back and the key released. Its text is
// safe to show a client; the operation and what to fix are logged at error level.
var ErrNoReference = errors.New("idem: internal error: the response could not be stored for replay")

// HeaderBodyOmitted marks a replay whose first answer's body was over idem.Config.MaxStoredBody:
// the status and headers are the first answer's, the body was not kept (fetch the resource it
// names instead).
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// Serve is the whole idempotent request: validate the key, build the scope (tenant first),
// claim, run fn in a transaction with lease renewal, complete and commit (or roll back and
// release when fn fails, panics, the context ends or the status is not persisted), and map
// every other case to a Problem. A store outage gives a 503 Problem, also when fn's connection
// is lost under it; fn never runs without a claim. A tenant or scope value PostgreSQL text cannot
// hold, or fn's statement refusing such a value (SQLSTATE 22021, 22P05), gives the 400
// request-invalid Problem. The error returned is fn's own (after the key was released),
// Config.Tenant's, or a store error that is not an outage (a missing table, say).
//
// When fn ran but its lease was taken over meanwhile, its work is rolled back and the result is
// a 409 in-progress problem: a retry replays what the request that took over stored. A request
// without a key on an operation whose key is optional runs fn in a plain transaction.
func Serve(ctx context.Context, s *idem.Store, p *Policy, req *Request, fn idem.HandlerFunc) (*Result, error) {
	key, prob := ParseKey(req.KeyValues, p.Key)
	if prob != nil {
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	cfg := s.Config()
	tenant, err := tenantOf(ctx, cfg, p, key)
	if err != nil {
		return nil, err
	}
	if prob := requestTextProblem(tenant, req); prob != nil {
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	var live *idem.Outcome // what fn answered, as written to this client
	var fnErr error        // fn's own error, told apart from the store's
	do := p.doParams(tenant, req.Scope, key, req.Fingerprint)
	res, err := s.Do(ctx, do, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		out, err := fn(ctx, tx)
		if err != nil {
			fnErr = err
			return nil, err
		}
		if out == nil {
			return nil, fmt.Errorf("idem: operation %s: the handler returned neither an outcome nor an error", p.Operation)
		}
		live = out
		if key == "" || !p.persist().Contains(out.Status) {
			return out, nil // not stored
		}
		return storedOutcome(cfg, p, out, do.Scope, key)
	})
	if err == nil {
		if res.Replayed {
			return &Result{Kind: ResultReplayed, Outcome: res.Outcome, declared: p.DeclaredHeaders, allow: p.ReplayHeaders}, nil
		}
		return &Result{Kind: ResultExecuted, Outcome: live, Persisted: res.Persisted && key != ""}, nil
	}
	// Only an error needs the target errors.As writes to, which lives on the heap.
	var inProgress *idem.InProgressError
	switch {
	case errors.Is(err, idem.ErrUncertain):
		// First: a run that failed after its provider call (a timeout, a store error) also
		// wraps that failure, and the client must hear that the outcome is uncertain.
		return &Result{Kind: ResultProblem, Problem: problemUncertain()}, nil
	case errors.As(err, &inProgress):
		return &Result{Kind: ResultProblem, Problem: problemInProgress(inProgress.RetryAfter)}, nil
	case errors.Is(err, idem.ErrKeyReused):
		return &Result{Kind: ResultProblem, Problem: problemKeyReused(p.mismatchStatus())}, nil
	case errors.Is(err, idem.ErrStoreUnavailable):
		cfg.Logger.WarnContext(ctx, "idem: store unavailable; answered 503", "operation", p.Operation,
			"key_hash", idem.KeyHash(do.Scope, key), "error", err)
		return &Result{Kind: ResultProblem, Problem: problemUnavailable(cfg.UnavailableRetryAfter)}, nil
	case errors.Is(err, idem.ErrLeaseLost):
		return &Result{Kind: ResultProblem, Problem: problemInProgress(time.Second)}, nil
	case errors.Is(err, idem.ErrHandlerTimeout):
		return &Result{Kind: ResultProblem, Problem: problemHandlerTimeout()}, nil
	}
	if prob := textErrorProblem(fnErr); prob != nil && errors.Is(err, fnErr) {
		// The handler bound a request value PostgreSQL text cannot hold: the client's
		// request, not the server, is at fault. Its work was rolled back, the key released.
		cfg.Logger.InfoContext(ctx, "idem: the handler's statement refused a request value that is not text; answered 400",
			"operation", p.Operation, "key_hash", idem.KeyHash(do.Scope, key), "error", err)
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	return nil, err
}

// tenantOf is the request's tenant when the policy's scope has one (and the request a key).
func tenantOf(ctx context.Context, cfg idem.Config, p *Policy, key string) (string, error) {
	if !p.ScopeTenant || key == "" {
		return "", nil
	}
	if cfg.Tenant == nil {
		return "", fmt.Errorf("idem: operation %s scopes keys by tenant but Config.Tenant is nil: set it to a function that returns the request's tenant", p.Operation)
	}
	tenant, err := cfg.Tenant(ctx)
	if err != nil {
		return "", err
	}
	if tenant == "" {
		// An empty tenant would let every unauthenticated caller share one key space.
		return "", fmt.Errorf("idem: operation %s: Config.Tenant returned an empty tenant: return an error for requests without one", p.Operation)
	}
	return tenant, nil
}

// storedOutcome is what the policy keeps of o.
func storedOutcome(cfg idem.Config, p *Policy, o *idem.Outcome, scope, key string) (*idem.Outcome, error) {
	switch p.Storage {
	case StorageReference:
		success := o.Status >= 200 && o.Status <= 299
		if success && o.Reference != "" {
			return &idem.Outcome{Status: o.Status, Reference: o.Reference}, nil
		}
		if success {
			// The details go to the log only: the error handler may print err.Error() to the
			// client, so the returned error stays generic.
			cfg.Logger.Error("idem: a reference-storage handler answered 2xx without a reference; the request was rolled back and answered 500: return the created resource's id as the reference",
				"operation", p.Operation, "key_hash", idem.KeyHash(scope, key), "status", o.Status)
			return nil, ErrNoReference
		}
		// Only a success is replayed by reloading its resource. Any other persisted answer (a
		// 404, a 409 about the resource, a redirect) is stored whole, like response storage, and
		// replayed byte for byte: reloading would turn a stored refusal into today's success.
	case StorageMarker:
		return &idem.Outcome{Status: o.Status}, nil
	}
	stored := &idem.Outcome{Status: o.Status, Header: replayHeaders(o.Header, p), Body: o.Body}
	if len(o.Body) > cfg.MaxStoredBody {
		// The handler succeeded and its work commits: a body too large to keep must not turn that
		// into a failure that a retry would repeat. The status and headers are kept, the body is
		// not, and a replay says so.
		cfg.Logger.Warn("idem: response body too large to store; a replay answers its status and headers with an empty body (raise Config.MaxStoredBody, or use reference storage)",
			"operation", p.Operation, "status", o.Status, "bytes", len(o.Body), "limit", cfg.MaxStoredBody)
		stored.Header = stored.Header.Clone() // it may be o's own (replayHeaders)
		if stored.Header == nil {
			stored.Header = http.Header{}
		}
		stored.Header.Set(HeaderBodyOmitted, "true")
		stored.Header.Del("Content-Type")
		stored.Body = nil
	}
	return stored, nil
}

// Op is one operation's typed request and handler, as generated code hands it to Handle. R is
// the operation's response object type.
type Op[R any] struct {
	// Key is the key's typed value (a header or path parameter field, pointer or not).
	Key any
	// Scope are the scope's parts besides the tenant, in order: "operation" (whose value is
	// Policy.Operation, so it has none here), "header:<Name>" or "path:<param>".
	Scope []Part
	// Parts are the request parts fingerprinted besides the route and the body:
	// "path:payment_id", "query:limit", "header:X-Account".
	Parts []Part
	// Run runs the handler in tx and returns its response (response and marker storage).
	Run func(ctx context.Context, tx pgx.Tx) (R, error)
	// RunReference is Run for reference storage: it also returns the reference a replay
	// reloads the resource from. Exactly one of Run and RunReference is set ([CheckOp]).
	RunReference func(ctx context.Context, tx pgx.Tx) (R, string, error)
	// Replay answers a replay anew (reference and marker storage): from the reference, or from
	// the status the first request answered with.
	Replay func(ctx context.Context, reference string, status int) (R, error)
	// Record renders a response into an outcome (see Record).
	Record func(R) (*idem.Outcome, error)
	// Receive, for a webhook receiver (x-idempotency delivery), verifies the delivery as sent
	// (its headers and body bytes) and returns its id, which is the key then (Key is not read).
	// It runs before anything else, so a delivery it refuses binds no key; its error is an
	// *idemwebhook.Error (see runtime/idemwebhook.Receiver).
	Receive func(ctx context.Context, h http.Header, body []byte) (string, error)
}

// Part is one named request value of an operation's scope or fingerprint.
type Part struct {
	Name  string // "operation", "path:payment_id", "query:limit", "header:X-Account"
	Value any    // the typed request field; none for "operation"
}

// scopeOperation is the scope part whose value is the operation id.
const scopeOperation = "operation"

// CheckOp reports what makes op unable to serve p, the shape generated code gives every
// operation: exactly one of Run and RunReference, RunReference for reference storage only, a
// Replay for reference and marker storage, a Record, and parts that are named once each in the
// forms Handle reads. Generated code calls it once per operation in NewIdempotentServer, with a
// zero request, so a mismatch is a startup panic rather than a 500 on every request.
func CheckOp[R any](p *Policy, op *Op[R]) error {
	if p == nil || op == nil {
		return errors.New("idem: CheckOp: nil policy or operation")
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("idem: operation of %s: %s", p.name(), fmt.Sprintf(format, args...)))
	}
	switch {
	case (op.Run == nil) == (op.RunReference == nil):
		bad("exactly one of Run and RunReference must be set")
	case (op.RunReference != nil) != (p.Storage == StorageReference):
		bad("RunReference is for reference storage, Run for the others")
	}
	if wantReplay := p.Storage == StorageReference || p.Storage == StorageMarker; (op.Replay != nil) != wantReplay {
		bad("Replay must be set for reference and marker storage, and only for them")
	}
	if op.Record == nil {
		bad("Record is nil")
	}
	checkParts := func(what string, parts []Part, operation bool) {
		seen := map[string]bool{}
		for _, part := range parts {
			kind, name, _ := strings.Cut(part.Name, ":")
			switch {
			case operation && part.Name == scopeOperation:
			case name != "" && (kind == "path" || kind == "header" || (!operation && kind == "query")):
			default:
				bad("%s part %q is not a part Handle reads", what, part.Name)
			}
			if seen[part.Name] {
				bad("%s part %q is listed twice", what, part.Name)
			}
			seen[part.Name] = true
		}
	}
	checkParts("scope", op.Scope, true)
	checkParts("fingerprint", op.Parts, false)
	return errors.Join(errs...)
}

// Handle is Serve for generated code: it fingerprints op's typed request by p, runs op.Run at
// most once per key, records its response, and answers a replay from the stored outcome or,
// for reference and marker storage, through op.Replay. A scope or fingerprint value that is
// not text PostgreSQL can hold (a NUL byte, invalid UTF-8) is refused first, with the 400
// request-invalid Problem.
//
// The body is fingerprinted as the client sent it, from the bytes Capture kept in ctx; a body
// that is not what its media type says is answered with a 400 body-invalid problem before any
// claim.
//
// A handler that panics has its work rolled back and its key released (by the runtime, as for
// any failure); Handle then returns ErrHandlerPanicked, logged with the stack, so that the
// server answers 500 and goes on serving instead of dropping the connection.
func Handle[R any](ctx context.Context, s *idem.Store, p *Policy, op *Op[R]) (res *Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { // net/http's own way to abort a response: let it through
				panic(v)
			}
			s.Config().Logger.ErrorContext(ctx, "idem: the handler panicked; its work was rolled back and its key released",
				"operation", p.Operation, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			res, err = nil, fmt.Errorf("%w (operation %s)", ErrHandlerPanicked, p.Operation)
		}
	}()
	res, err = handle(ctx, s, p, op)
	if err == nil {
		res.Bind(ctx, p)
	}
	if err == nil && res.Kind == ResultProblem && res.Problem.Status < 500 {
		// A refusal is the client's to fix, so it is no warning; but a developer asking why a
		// request was refused finds it at debug, with the code the client got.
		logRefused(ctx, s.Config().Logger, p, res.Problem)
	}
	return res, err
}

// Bind makes r answer as the request of ctx, an operation of policy p: a problem through the
// server's [Renderer] ([CaptureWith]) with p's echo headers, and a replay with p's echo headers
// taken from the request. [Handle] binds its results; generated code binds the problems it
// answers itself (a body refused by validation). Without a request captured in ctx, r answers as
// it would unbound.
func (r *Result) Bind(ctx context.Context, p *Policy) {
	b, ok := BodyFromContext(ctx)
	if !ok || b.req == nil {
		return
	}
	// The request is rebuilt with ctx only when a problem is rendered: a replay needs its
	// headers alone, and every answer passes here.
	r.req, r.ctx, r.log, r.op = b.req, ctx, b.log, p
	if p != nil {
		r.echo = p.EchoHeaders
	}
}

// ErrHandlerPanicked is Handle's error for a handler that panicked.
var ErrHandlerPanicked = errors.New("idem: the handler panicked")

func handle[R any](ctx context.Context, s *idem.Store, p *Policy, op *Op[R]) (*Result, error) {
	if op.Receive != nil {
		key, prob := receive(ctx, s, p, op)
		if prob != nil {
			return &Result{Kind: ResultProblem, Problem: prob}, nil
		}
		delivery := *op
		delivery.Key, op = key, &delivery
	}
	req, err := op.request(ctx, p)
	if err != nil {
		if prob := bodyErrorProblem(err); prob != nil {
			return &Result{Kind: ResultProblem, Problem: prob}, nil
		}
	}
	if errors.Is(err, errNoBody) {
		// A wiring that skips the body capture (oapi-codegen's own HandlerWithOptions around
		// NewStrictHandler, say) cannot fingerprint what the client sent. It is answered
		// through the response path like any problem, so that whichever error handler the
		// wiring has, the client gets problem+json and the log says how to fix the wiring.
		s.Config().Logger.ErrorContext(ctx, "idem: "+errNoBody.Error()+"; answered 500 and claimed nothing", "operation", p.Operation)
		return &Result{Kind: ResultProblem, Problem: problemNotCaptured()}, nil
	}
	if err != nil {
		return nil, err
	}
	if prob := mediaTypeProblem(ctx, p); prob != nil {
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	if prob := op.textProblem(); prob != nil {
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	if b, ok := BodyFromContext(ctx); ok && p.ValidateBody != nil {
		if prob := p.ValidateBody(ctx, b.ContentType, b.Bytes); prob != nil {
			return &Result{Kind: ResultProblem, Problem: prob}, nil
		}
	}
	res, err := Serve(ctx, s, p, req, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		resp, ref, err := op.run(ctx, tx)
		if err != nil {
			return nil, err
		}
		if isNil(resp) {
			return nil, fmt.Errorf("%s returned a nil response and no error", p.Operation)
		}
		out, err := op.Record(resp)
		if err != nil {
			return nil, err
		}
		out.Reference = ref
		return out, nil
	})
	if err != nil || res.Kind != ResultReplayed || op.Replay == nil {
		return res, err
	}
	// An answer stored without a reference (a 4xx under reference storage, say) has no
	// resource to reload: it was stored whole and is replayed as it is.
	if p.Storage == StorageReference && res.Outcome.Reference == "" {
		return res, nil
	}
	resp, err := op.Replay(ctx, res.Outcome.Reference, res.Outcome.Status)
	if err != nil {
		return nil, err
	}
	if isNil(resp) {
		return nil, fmt.Errorf("the replay of %s returned a nil response and no error", p.Operation)
	}
	out, err := op.Record(resp)
	if err != nil {
		return nil, err
	}
	return &Result{Kind: ResultReplayed, Outcome: out, recomputed: true}, nil
}

// bodyErrorProblem is the 400 body-invalid problem for an *idem.BodyError err, or nil. The target
// errors.As writes to lives on the heap, so callers ask only about an error.
func bodyErrorProblem(err error) *Problem {
	var bad *idem.BodyError
	if errors.As(err, &bad) {
		return newProblem(http.StatusBadRequest, CodeBodyInvalid, "the request body is malformed: "+bad.Reason)
	}
	return nil
}

// run runs whichever handler op has.
func (op *Op[R]) run(ctx context.Context, tx pgx.Tx) (R, string, error) {
	if op.RunReference != nil {
		return op.RunReference(ctx, tx)
	}
	resp, err := op.Run(ctx, tx)
	return resp, "", err
}

// request builds the runtime's view of op's request under p.
func (op *Op[R]) request(ctx context.Context, p *Policy) (*Request, error) {
	req := &Request{}
	req.KeyValues = keyValues(op.Key, &req.key)
	if len(op.Scope) > 0 {
		req.Scope = req.scope[:0]
	}
	for _, part := range op.Scope {
		v := p.Operation
		if part.Name != scopeOperation {
			v = text(part.Value)
		}
		req.Scope = append(req.Scope, ScopePart{Name: part.Name, Value: v})
	}
	fp := idem.NewFingerprinter(p.Route)
	for _, part := range op.Parts {
		if err := fp.Add(part.Name, part.Value); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Operation, err)
		}
	}
	if !p.NoFingerprint {
		body, ok := BodyFromContext(ctx)
		if !ok && p.Body {
			return nil, fmt.Errorf("operation %s: %w", p.Operation, errNoBody)
		}
		if ok {
			// The edge fingerprinted this body already: when the parts as bound framed what it
			// read from the request as sent, the sum is its (the body's frame is the same).
			if sum, same := body.reuse(p, fp.Framed()); same {
				req.Fingerprint = sum
				return req, nil
			}
		}
		if ok && len(body.Bytes) > 0 {
			if err := fp.RawBody(body.ContentType, body.Bytes, p.Exclude...); err != nil {
				return nil, err
			}
		}
	}
	req.Fingerprint = fp.Sum()
	return req, nil
}

// keyValues is a typed key as the key parser reads it: nil when absent (a nil pointer, or an
// empty field that is not a pointer, which cannot tell absent from empty). A pointer to an empty
// value is a header sent empty: a malformed key (key-invalid), not a missing one. The value is
// held in one, which the slice returned shares.
func keyValues(v any, one *[1]string) []string {
	switch x := v.(type) { // the usual types, without reflection
	case string:
		if x == "" {
			return nil
		}
		one[0] = x
		return one[:]
	case *string:
		if x == nil {
			return nil
		}
		one[0] = *x
		return one[:]
	}
	if isNil(v) {
		return nil
	}
	s := text(v)
	if s == "" && reflect.ValueOf(v).Kind() != reflect.Pointer {
		return nil
	}
	one[0] = s
	return one[:]
}

// text renders a parameter's value; an absent optional one (a nil pointer) is "".
func text(v any) string {
	switch x := v.(type) { // what parameters mostly are, without reflection and fmt
	case string:
		return x
	case *string:
		if x == nil {
			return ""
		}
		return *x
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return ""
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return ""
		}
		rv = rv.Elem()
	}
	return fmt.Sprint(rv.Interface())
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// Record returns a recorder for one operation's responses: visit is the response's Visit
// method (CreatePaymentResponseObject.VisitCreatePaymentResponse), run against a Recorder.
func Record[R any](visit func(R, http.ResponseWriter) error) func(R) (*idem.Outcome, error) {
	return func(resp R) (*idem.Outcome, error) {
		rec := NewRecorder()
		if err := visit(resp, rec); err != nil {
			return nil, err
		}
		return rec.take(), nil
	}
}

// mediaTypeProblem is the 415 media-type-unsupported problem for a body whose Content-Type the
// operation does not declare, or nil. Only a body that was captured and is not empty is judged.
func mediaTypeProblem(ctx context.Context, p *Policy) *Problem {
	b, ok := BodyFromContext(ctx)
	if len(p.BodyTypes) == 0 || !ok || len(b.Bytes) == 0 {
		return nil
	}
	for _, declared := range p.BodyTypes {
		// The common case, a Content-Type written as declared ("application/json"), needs no
		// parsing: a declared type without parameters or wildcards matches itself.
		if declared != "" && strings.EqualFold(b.ContentType, declared) && !strings.ContainsAny(declared, "*;") {
			return nil
		}
	}
	mt, _, err := mime.ParseMediaType(b.ContentType)
	if err == nil {
		for _, declared := range p.BodyTypes {
			if mediaTypeMatches(strings.ToLower(declared), mt) {
				return nil
			}
		}
	}
	return newProblem(http.StatusUnsupportedMediaType, CodeMediaTypeUnsupported, fmt.Sprintf(
		"this operation accepts a body of %s: send it with that Content-Type", strings.Join(p.BodyTypes, " or ")))
}

// mediaTypeMatches says whether media type mt (lower case, without parameters) is one a declared
// media type, with OpenAPI's wildcards ("*/*", "image/*", "application/*+json"), stands for.
func mediaTypeMatches(declared, mt string) bool {
	if base, _, err := mime.ParseMediaType(declared); err == nil {
		declared = base
	}
	ok, err := path.Match(declared, mt)
	return declared == mt || (err == nil && ok)
}
