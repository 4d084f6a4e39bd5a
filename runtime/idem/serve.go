package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

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

// Policy is one operation's resolved x-idempotency, emitted by the generator as a literal.
// Zero fields mean the defaults of DESIGN §3: response storage, lease claims, 24h TTL, 60s lease,
// mismatch status 422, persist 2xx/3xx/4xx, key header Idempotency-Key.
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

func (p *Policy) persist() StatusSet {
	if p.Persist.IsEmpty() {
		return defaultPersist
	}
	return p.Persist
}

func (p *Policy) mismatchStatus() int {
	if p.MismatchStatus == 0 {
		return http.StatusUnprocessableEntity
	}
	return p.MismatchStatus
}

// Request is one HTTP request as the generated adapter sees it.
type Request struct {
	// KeyValues are the raw values of the key header (nil when absent), or the path value.
	KeyValues []string
	Scope     []ScopePart
	// Fingerprint is the canonical request hash (see Fingerprinter).
	Fingerprint string
}

// HandlerFunc runs the business handler inside tx and returns what it answered (recorded with a
// Recorder). For reference storage a 2xx Outcome must carry a Reference (else ErrNoReference);
// any other persisted outcome without one is stored whole and replayed like response storage. It must neither commit nor
// roll back tx: the runtime completes the key in it and commits both together.
type HandlerFunc func(ctx context.Context, tx pgx.Tx) (*Outcome, error)

// ResultKind says what Serve decided.
type ResultKind int

const (
	ResultExecuted ResultKind = iota + 1 // the handler ran now; Outcome is its answer
	ResultReplayed                       // a stored outcome; Replay<Op> answers marker replays and those with a Reference
	ResultProblem                        // Problem says why the handler did not run
)

// Result is what Serve returns for the adapter to write.
type Result struct {
	Kind    ResultKind
	Outcome *Outcome
	Problem *Problem
	// Persisted (ResultExecuted) says whether the outcome was committed for replay; false when
	// its status is outside the policy's persist set or the request had no key.
	Persisted bool

	allow []string // extra replay headers of the policy
}

// Serve is the whole idempotent request: validate the key, build the scope (tenant first), claim,
// run fn in a transaction with lease renewal, complete + commit (or roll back + release when fn
// fails, panics, the context ends or the status is not persisted), and map every other case to a
// Problem. Store outages give a 503 Problem; fn never runs without a claim.
// The returned error is fn's own error (after the key has been released).
//
// Other errors: Config.Tenant's error, ErrBodyTooLarge (response storage, body over
// Config.MaxStoredBody; the work was rolled back and the key released), and store errors that
// are not outages (e.g. a missing table). When fn ran but its lease was taken over meanwhile,
// its work is rolled back and the result is a 409 in-progress problem: a retry replays what the
// request that took over stored. A request without a key on an operation whose key is optional
// runs fn in a plain transaction.
func (s *Store) Serve(ctx context.Context, p *Policy, req *Request, fn HandlerFunc) (*Result, error) {
	key, prob := ParseKey(req.KeyValues, p.Key)
	if prob != nil {
		return &Result{Kind: ResultProblem, Problem: prob}, nil
	}
	if key == "" {
		return s.serveWithoutKey(ctx, p, fn)
	}
	var tenant string
	if p.ScopeTenant {
		if s.cfg.Tenant == nil {
			return nil, fmt.Errorf("idem: operation %s scopes keys by tenant but Config.Tenant is nil: set it to a function that returns the request's tenant", p.Operation)
		}
		var err error
		if tenant, err = s.cfg.Tenant(ctx); err != nil {
			return nil, err
		}
		if tenant == "" {
			// An empty tenant would let every unauthenticated caller share one key space.
			return nil, fmt.Errorf("idem: operation %s: Config.Tenant returned an empty tenant: return an error for requests without one", p.Operation)
		}
	}
	persist := p.persist()
	ep := &execParams{
		claim: ClaimParams{Tenant: tenant, Scope: ScopeString(tenant, req.Scope), Key: key, Operation: p.Operation,
			Fingerprint: req.Fingerprint, Lease: p.Lease, TTL: p.TTL},
		mode:    p.Claim,
		wait:    p.Wait,
		persist: persist.Contains,
		stored:  func(o *Outcome) (*Outcome, error) { return s.storedOutcome(p, o) },
	}
	r, err := s.execute(ctx, ep, fn)
	switch {
	case errors.Is(err, ErrStoreUnavailable):
		s.log.Warn("idem: store unavailable; answered 503", "operation", p.Operation,
			"key_hash", KeyHash(ep.claim.Scope, key), "error", err)
		return &Result{Kind: ResultProblem, Problem: problemUnavailable(s.cfg.UnavailableRetryAfter)}, nil
	case errors.Is(err, ErrLeaseLost):
		return &Result{Kind: ResultProblem, Problem: problemInProgress(time.Second)}, nil
	case err != nil:
		return nil, err
	}
	switch r.status {
	case ClaimReplay:
		return &Result{Kind: ResultReplayed, Outcome: r.outcome, allow: p.ReplayHeaders}, nil
	case ClaimInProgress:
		return &Result{Kind: ResultProblem, Problem: problemInProgress(r.retryAfter)}, nil
	case ClaimMismatch:
		return &Result{Kind: ResultProblem, Problem: problemKeyReused(p.mismatchStatus())}, nil
	}
	return &Result{Kind: ResultExecuted, Outcome: r.outcome, Persisted: r.persisted}, nil
}

// storedOutcome is what the policy keeps of o.
func (s *Store) storedOutcome(p *Policy, o *Outcome) (*Outcome, error) {
	switch p.Storage {
	case StorageReference:
		success := o.Status >= 200 && o.Status <= 299
		if success && o.Reference != "" {
			return &Outcome{Status: o.Status, Reference: o.Reference}, nil
		}
		if success {
			// The details go to the log only: the strict handler's default error handler
			// prints err.Error() to the client, so the returned error stays generic.
			s.log.Error("idem: a reference-storage handler answered 2xx without a reference; the request was rolled back and answered 500: return the created resource's id as the reference",
				"operation", p.Operation, "status", o.Status)
			return nil, ErrNoReference
		}
		// Only a success is replayed by reloading its resource. Any other persisted answer (a
		// 404, a 409 about the resource, a redirect) is stored whole, like response storage, and
		// replayed byte for byte: reloading would turn a stored refusal into today's success.
	case StorageMarker:
		return &Outcome{Status: o.Status}, nil
	}
	if len(o.Body) > s.cfg.MaxStoredBody {
		return nil, fmt.Errorf("%w: operation %s answered %d bytes, the limit is %d (raise Config.MaxStoredBody or use reference storage)",
			ErrBodyTooLarge, p.Operation, len(o.Body), s.cfg.MaxStoredBody)
	}
	return &Outcome{Status: o.Status, Header: replayHeaders(o.Header, p.ReplayHeaders), Body: o.Body}, nil
}

func (s *Store) serveWithoutKey(ctx context.Context, p *Policy, fn HandlerFunc) (*Result, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		if errors.Is(err, ErrStoreUnavailable) {
			return &Result{Kind: ResultProblem, Problem: problemUnavailable(s.cfg.UnavailableRetryAfter)}, nil
		}
		return nil, err
	}
	defer s.rollback(ctx, tx) // a no-op after Commit; undoes the work on error or panic
	out, err := fn(ctx, tx)
	if err == nil && out == nil {
		err = fmt.Errorf("idem: operation %s: the handler returned neither an outcome nor an error", p.Operation)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	if !p.persist().Contains(out.Status) {
		return &Result{Kind: ResultExecuted, Outcome: out}, nil // rolled back by the deferred call
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, storeError(ctx, "commit", err)
	}
	return &Result{Kind: ResultExecuted, Outcome: out}, nil
}

// HeaderReplayed marks an answer that repeats a stored outcome.
const HeaderReplayed = "Idempotent-Replayed"

// defaultReplayHeaders are replayed for every operation; a policy's ReplayHeaders add to them.
var defaultReplayHeaders = []string{"Content-Type", "Content-Language", "Location", "ETag", "Last-Modified", "Link"}

// neverReplayed are dropped even when a policy lists them: credentials, cookies and hop-by-hop
// headers belong to one exchange, not to the outcome.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
	"Www-Authenticate": true, "Cookie": true, "Connection": true, "Keep-Alive": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	HeaderReplayed: true,
}

func replayAllowed(name string, extra []string) bool {
	name = http.CanonicalHeaderKey(name)
	if neverReplayed[name] {
		return false
	}
	for _, lists := range [][]string{defaultReplayHeaders, extra} {
		for _, a := range lists {
			if http.CanonicalHeaderKey(a) == name {
				return true
			}
		}
	}
	return false
}

func replayHeaders(h http.Header, extra []string) http.Header {
	out := http.Header{}
	for k, vs := range h {
		if replayAllowed(k, extra) {
			out[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// WriteTo writes the result: the outcome (with Idempotent-Replayed: true on replays, only
// allow-listed headers) or the problem. A fresh execution is written as the handler produced it,
// with all its headers. Adapters answer marker replays and reference replays that carry a
// Reference themselves, through Replay<Op> and ReplayWriter, instead of calling WriteTo; a
// reference-storage outcome stored without a Reference (a 4xx, say) is replayed by WriteTo.
func (r *Result) WriteTo(w http.ResponseWriter) error {
	switch r.Kind {
	case ResultProblem:
		return r.Problem.WriteTo(w)
	case ResultReplayed, ResultExecuted:
		if r.Outcome == nil {
			return errors.New("idem: Result.WriteTo: no outcome to write")
		}
		h := w.Header()
		for k, vs := range r.Outcome.Header {
			if r.Kind == ResultExecuted || replayAllowed(k, r.allow) {
				h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
			}
		}
		if r.Kind == ResultReplayed {
			h.Set(HeaderReplayed, "true")
			// A replay answers one client's retry of one key: no shared cache may keep it. The
			// handler's own Cache-Control is not replayed, so this holds whatever it said.
			h.Set("Cache-Control", "no-store")
		}
		status := r.Outcome.Status
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		_, err := w.Write(r.Outcome.Body)
		return err
	}
	return fmt.Errorf("idem: Result.WriteTo: unknown result kind %d", r.Kind)
}

// ReplayWriter wraps w so that the answer written through it carries Idempotent-Replayed: true
// and Cache-Control: no-store, as every replay does.
// Adapters use it for reference and marker replays, whose answer Replay<Op> recomputes: pass
// ReplayWriter(w) to the response's Visit method. The header is set before the status line is
// written, whatever the handler does to the header map first.
func ReplayWriter(w http.ResponseWriter) http.ResponseWriter {
	w.Header().Set(HeaderReplayed, "true")
	w.Header().Set("Cache-Control", "no-store")
	return &replayWriter{ResponseWriter: w}
}

type replayWriter struct {
	http.ResponseWriter
	wrote bool
}

func (rw *replayWriter) WriteHeader(status int) {
	if !rw.wrote {
		rw.wrote = true
		rw.Header().Set(HeaderReplayed, "true")
		rw.Header().Set("Cache-Control", "no-store")
	}
	rw.ResponseWriter.WriteHeader(status)
}

func (rw *replayWriter) Write(b []byte) (int, error) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush, deadlines).
func (rw *replayWriter) Unwrap() http.ResponseWriter { return rw.ResponseWriter }
