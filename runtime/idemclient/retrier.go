package idemclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Defaults, chosen for a payments caller: long enough to outwait a server restart and the lease
// of a request orphaned by a crashed server (60s by default) plus its takeover, short enough that
// a user is not kept waiting without an answer. Attempts that get no answer, or an answer that
// says to come back ([Decision.Waiting]), do not count toward MaxAttempts: while the server is
// unreachable only MaxElapsed (and the context's deadline) ends a call, and BackoffCap bounds how
// long a server that is back goes unnoticed.
const (
	DefaultMaxAttempts    = 10
	DefaultMaxElapsed     = 2 * time.Minute
	DefaultBackoffBase    = 250 * time.Millisecond
	DefaultBackoffCap     = 10 * time.Second
	DefaultAttemptTimeout = 30 * time.Second
	DefaultMaxBodyBytes   = 8 << 20
	// DefaultMaxAnswerBytes bounds the answer kept of each attempt (it is buffered, to decode a
	// problem and to hand the final answer on).
	DefaultMaxAnswerBytes = 64 << 20
)

// Options configure a [Retrier]. Zero fields take the defaults above; nil Options are all
// defaults.
type Options struct {
	// MaxAttempts bounds the attempts of one call that the server answered with a failure a
	// retry may fix (500 internal, 503 handler-timeout, 429, an unstored 5xx), the first
	// included; 1 turns retries off. Attempts with no answer (refused, reset, timed out) and
	// answers that only say to come back ([Decision.Waiting]: 409 in-progress, 503
	// store-unavailable, 502, 503 or 504 from a gateway) do not count: MaxElapsed bounds those.
	MaxAttempts int
	// MaxElapsed bounds a call from its first attempt: no attempt starts after it. The context's
	// deadline, when earlier, bounds it too.
	MaxElapsed time.Duration
	// BackoffBase and BackoffCap shape the wait before retry n: a uniformly random duration in
	// [0, min(BackoffCap, BackoffBase·2^(n-1))] (full jitter), raised to the answer's Retry-After
	// when it has one.
	BackoffBase, BackoffCap time.Duration
	// AttemptTimeout bounds one attempt (connecting, sending, the server's work, reading the
	// answer); an attempt that runs out is retried. Negative: no bound besides the call's.
	AttemptTimeout time.Duration
	// MaxBodyBytes bounds the request body kept to be re-sent; a larger body fails the call
	// before its first attempt with [ErrBodyTooLarge].
	MaxBodyBytes int64
	// MaxAnswerBytes bounds the answer read from each attempt; a larger one fails the call.
	MaxAnswerBytes int64
	// HTTPClient sends the requests of the generated client; nil: a client of its own. (The
	// Retrier itself sends nothing: [Request.Send] does.)
	HTTPClient *http.Client
	// KeyFunc makes the key of a call that was given none; nil: [NewKey], a UUIDv4. It runs
	// once per call, before the first attempt.
	KeyFunc func() (string, error)
	// OnRetry, when set, is called before each wait: the attempt that just failed (1 for the
	// first), why it is retried, and how long the wait is. For logs and metrics; it must not
	// block.
	OnRetry func(attempt int, reason string, wait time.Duration)
}

// Retrier runs the attempts of idempotent calls. It is safe for concurrent use.
type Retrier struct {
	o Options
}

// New returns a Retrier with o's settings (nil: the defaults). It refuses settings that
// cannot work, such as a backoff cap below its base.
func New(o *Options) (*Retrier, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.MaxAttempts < 0 || c.MaxElapsed < 0 || c.BackoffBase < 0 || c.BackoffCap < 0 || c.MaxBodyBytes < 0 || c.MaxAnswerBytes < 0 {
		return nil, errors.New("idemclient: Options: MaxAttempts, MaxElapsed, BackoffBase, BackoffCap, MaxBodyBytes and MaxAnswerBytes must not be negative (0 takes the default)")
	}
	c.MaxAttempts = cmpOr(c.MaxAttempts, DefaultMaxAttempts)
	c.MaxElapsed = cmpOr(c.MaxElapsed, DefaultMaxElapsed)
	c.BackoffBase = cmpOr(c.BackoffBase, DefaultBackoffBase)
	c.BackoffCap = cmpOr(c.BackoffCap, DefaultBackoffCap)
	c.AttemptTimeout = cmpOr(c.AttemptTimeout, DefaultAttemptTimeout)
	c.MaxBodyBytes = cmpOr(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.MaxAnswerBytes = cmpOr(c.MaxAnswerBytes, DefaultMaxAnswerBytes)
	if c.BackoffCap < c.BackoffBase {
		return nil, fmt.Errorf("idemclient: Options: BackoffCap %s is below BackoffBase %s", c.BackoffCap, c.BackoffBase)
	}
	if c.KeyFunc == nil {
		c.KeyFunc = func() (string, error) { return NewKey(), nil }
	}
	return &Retrier{o: c}, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Options returns the Retrier's settings, defaults applied.
func (r *Retrier) Options() Options { return r.o }

// Operation is what the attempts of one idempotent operation need to know of its policy.
type Operation struct {
	// Route names the operation in messages: "POST /v1/payments".
	Route string
	// KeyHeader is the header the key is sent in; "" when the key is a path parameter
	// (key.from: path:<param>), which the request carries already.
	KeyHeader string
	// Persist is the operation's persist set ("2xx", "404", …): the answers the server stores.
	// nil means the server's default, 2xx, 3xx and 4xx.
	Persist []string
}

func (op *Operation) persist() []string {
	if op.Persist == nil {
		return idemwire.DefaultPersist
	}
	return op.Persist
}

// stores reports whether the persist set keeps status (idemwire.StatusSet: 408, 425 and 429
// are never stored). Items are read case-insensitively; a malformed one stores nothing.
func (op *Operation) stores(status int) bool {
	items := make([]string, len(op.persist()))
	for i, p := range op.persist() {
		items[i] = strings.ToLower(p)
	}
	set, _ := idemwire.ParseStatuses(items...)
	return set.Contains(status)
}

// Request is one logical call, as the generated client hands it to [Retrier.Do].
type Request struct {
	// Body is the request body, read once before the first attempt; nil for none.
	Body io.Reader
	// Key is the caller's key, if any; [WithKey] wins over it. Without either, a key header
	// that Send's request already carries (set from oapi-codegen's typed parameters) is the
	// caller's, and a new key is made when there is none.
	Key string
	// Send makes one attempt: it builds the request with body (the same bytes each time; nil
	// when there is none), calls edit on it just before sending (edit sets the key header and
	// runs the call's request editors), and sends it. oapi-codegen's client methods are Send
	// functions: edit is one of their request editors.
	Send func(ctx context.Context, body io.Reader, edit func(context.Context, *http.Request) error) (*http.Response, error)
}

// Result describes a call that ended, filled in through [WithResult].
type Result struct {
	Key      string // the key sent; "" for a path key
	Attempts int    // attempts made, the first included
	Replayed bool   // the final answer was replayed by the server (Idempotent-Replayed: true)
	Status   int    // the final answer's status; 0 when there was none
}

// CallOption changes one call.
type CallOption func(*callOpts)

type callOpts struct {
	key     string
	result  *Result
	editors []func(context.Context, *http.Request) error
}

// WithKey sends key instead of a new one: a business id (a cart, an order) that names the
// operation, or the key of an earlier call that gave up, to resume it.
func WithKey(key string) CallOption { return func(c *callOpts) { c.key = key } }

// WithResult fills *r when the call ends, successfully or not.
func WithResult(r *Result) CallOption { return func(c *callOpts) { c.result = r } }

// WithRequestEditor runs fn on the request of every attempt, after the key is set: what
// oapi-codegen's per-call request editors do.
func WithRequestEditor(fn func(context.Context, *http.Request) error) CallOption {
	return func(c *callOpts) { c.editors = append(c.editors, fn) }
}

// Do runs the call req of op: one key and one body for all its attempts, retried as [Classify]
// decides, within the context's deadline, [Options.MaxElapsed] and [Options.MaxAttempts].
//
// It returns the final answer, its body buffered (readable again, Close optional). For an
// error status (4xx, 5xx) it returns the answer and an [*Error] with the decoded problem. With
// no final answer it returns a nil answer and a [*GiveUpError]. An error before the first
// attempt (a body over MaxBodyBytes, a KeyFunc failure) or one building the request is
// returned as it is.
func (r *Retrier) Do(ctx context.Context, op *Operation, req Request, opts ...CallOption) (*http.Response, error) {
	var c callOpts
	for _, o := range opts {
		o(&c)
	}
	res := &Result{}
	if c.result != nil {
		res = c.result
		*res = Result{}
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(io.LimitReader(req.Body, r.o.MaxBodyBytes+1))
		if err != nil {
			return nil, fmt.Errorf("idemclient: %s: reading the request body: %w", op.Route, err)
		}
		if int64(len(b)) > r.o.MaxBodyBytes {
			return nil, fmt.Errorf("%w: %s: the body is over %d bytes (Options.MaxBodyBytes); nothing was sent", ErrBodyTooLarge, op.Route, r.o.MaxBodyBytes)
		}
		body = b
	}
	// The key: WithKey's, else the request's own (Request.Key, or the key header its parameters
	// set, read on the first attempt), else a new one, made now so that a KeyFunc failure
	// stops the call before anything is sent.
	var fallback string
	if op.KeyHeader != "" {
		res.Key = cmpOr(c.key, req.Key)
		if res.Key == "" {
			k, err := r.o.KeyFunc()
			if err != nil {
				return nil, fmt.Errorf("idemclient: %s: Options.KeyFunc: %w", op.Route, err)
			}
			if k == "" {
				return nil, fmt.Errorf("idemclient: %s: Options.KeyFunc returned an empty key", op.Route)
			}
			fallback = k
		}
	}

	start := time.Now()
	bound, boundName := start.Add(r.o.MaxElapsed), fmt.Sprintf("MaxElapsed (%s)", r.o.MaxElapsed)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(bound) {
		bound, boundName, ctxDeadline = d, "the context's deadline", true
	}
	giveUp := func(why error, wait time.Duration, last error, bn string) error {
		if ctxDeadline && errors.Is(why, ErrDeadline) {
			why = errors.Join(why, context.DeadlineExceeded)
		}
		return &GiveUpError{Route: op.Route, Key: res.Key, Attempts: res.Attempts, Elapsed: time.Since(start),
			Why: why, Bound: bn, Wait: wait, Last: last}
	}
	counted := 0 // the attempts MaxAttempts bounds
	for attempt := 1; ; attempt++ {
		res.Attempts = attempt
		out := r.attempt(ctx, op, req, body, res, fallback, bound, c.editors)
		if !out.waiting {
			counted++
		}
		if out.final {
			if out.resp != nil {
				res.Status = out.resp.StatusCode
				res.Replayed = out.resp.Header.Get(HeaderReplayed) == "true"
			}
			return out.resp, out.err
		}
		if err := ctx.Err(); err != nil {
			return nil, giveUp(context.Cause(ctx), 0, out.err, "")
		}
		if counted >= r.o.MaxAttempts || r.o.MaxAttempts == 1 { // 1: no retries, whatever the answer
			return nil, giveUp(ErrAttemptsExhausted, 0, out.err, fmt.Sprintf("MaxAttempts (%d answered attempts)", r.o.MaxAttempts))
		}
		wait := max(out.wait, r.backoff(attempt))
		if remaining := time.Until(bound); wait >= remaining {
			// A Retry-After is a floor: an attempt before it would only be refused again. The
			// backoff is not: it shrinks to fit what is left.
			if out.wait >= remaining || remaining < r.o.BackoffBase {
				return nil, giveUp(ErrDeadline, wait, out.err, boundName)
			}
			wait = out.wait + (remaining-out.wait)/2
		}
		if r.o.OnRetry != nil {
			r.o.OnRetry(attempt, out.reason, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, giveUp(context.Cause(ctx), 0, out.err, "")
		case <-t.C:
		}
	}
}

// backoff is the full-jitter wait before retry n (n ≥ 1).
func (r *Retrier) backoff(n int) time.Duration {
	ceil := r.o.BackoffCap
	if n-1 < 62 {
		if d := r.o.BackoffBase << (n - 1); d > 0 && d < ceil {
			ceil = d
		}
	}
	return rand.N(ceil + 1)
}

// outcome is one attempt's result.
type outcome struct {
	final  bool
	resp   *http.Response
	err    error         // final: the call's error; else: why this attempt failed
	wait   time.Duration // the least wait before the next attempt
	reason string
	// waiting: the attempt got no answer, or one that only says to come back
	// (Decision.Waiting): it does not count toward MaxAttempts.
	waiting bool
}

func (r *Retrier) attempt(ctx context.Context, op *Operation, req Request, body []byte, res *Result, fallback string, bound time.Time, editors []func(context.Context, *http.Request) error) outcome {
	actx, cancel := context.WithDeadline(ctx, bound)
	defer cancel()
	if r.o.AttemptTimeout > 0 {
		var cancelAttempt context.CancelFunc
		actx, cancelAttempt = context.WithTimeout(actx, r.o.AttemptTimeout)
		defer cancelAttempt()
	}
	built := false
	edit := func(ctx context.Context, hr *http.Request) error {
		if op.KeyHeader != "" {
			if res.Key == "" {
				// The first attempt: a key the request's parameters carry is the caller's.
				res.Key = cmpOr(hr.Header.Get(op.KeyHeader), fallback)
			}
			hr.Header.Set(op.KeyHeader, res.Key)
		}
		for _, e := range editors {
			if err := e(ctx, hr); err != nil {
				return err
			}
		}
		built = true
		return nil
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	resp, err := req.Send(actx, rd, edit)
	if err != nil {
		if !built {
			// The request was never sent: its parameters or an editor failed, and would again.
			return outcome{final: true, err: fmt.Errorf("idemclient: %s: building the request: %w", op.Route, err)}
		}
		return r.transportFailure(ctx, actx, op, bound, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, r.o.MaxAnswerBytes+1))
	_ = resp.Body.Close()
	if err != nil {
		return r.transportFailure(ctx, actx, op, bound, fmt.Errorf("reading the answer: %w", err))
	}
	if int64(len(b)) > r.o.MaxAnswerBytes {
		return outcome{final: true, err: fmt.Errorf("idemclient: %s: the answer is over %d bytes (Options.MaxAnswerBytes)", op.Route, r.o.MaxAnswerBytes)}
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	d := Classify(op, resp.StatusCode, resp.Header, b)
	var e *Error
	if resp.StatusCode >= 400 {
		e = DecodeError(resp.StatusCode, resp.Header, b)
		e.Route, e.Key = op.Route, res.Key
	}
	if d.Retry {
		return outcome{err: e, wait: d.Wait, reason: d.Reason, waiting: d.Waiting}
	}
	if e != nil {
		return outcome{final: true, resp: resp, err: e}
	}
	return outcome{final: true, resp: resp}
}

// transportFailure judges an attempt that got no answer. The request may have run: that is what
// the key is for, so it is retried, unless the call itself ended or the failure is one no retry
// fixes (a certificate the client refuses).
func (r *Retrier) transportFailure(ctx, actx context.Context, op *Operation, bound time.Time, err error) outcome {
	if ctx.Err() != nil {
		return outcome{err: err, reason: "the context ended", waiting: true}
	}
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var tlsCert *tls.CertificateVerificationError
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &tlsCert) {
		return outcome{final: true, err: fmt.Errorf("idemclient: %s: %w", op.Route, err)}
	}
	reason := "transport error: " + err.Error()
	if actx.Err() != nil {
		if !time.Now().Before(bound) {
			reason = "the attempt ran into the call's deadline"
		} else {
			reason = fmt.Sprintf("the attempt timed out (AttemptTimeout %s)", r.o.AttemptTimeout)
		}
	}
	return outcome{err: err, reason: reason, waiting: true}
}
