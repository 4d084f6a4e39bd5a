package idemhttp

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Renderer writes a refusal, a [Problem] the runtime decided (its Code, Status, Detail and
// RetryAfter), in the API's own error format: the body, media type and headers the spec declares
// for its errors. A server without one answers RFC 9457 problems ([Problem.WriteTo]).
//
// Before Render is called, w's header already holds Cache-Control: no-store and, when
// p.RetryAfter is set, Retry-After in whole seconds, as every refusal carries them, the
// operation's echo headers ([Policy.EchoHeaders]) copied from r, and Idempotency-Refusal naming
// p's code when it is one of the runtime's ([HeaderRefusal]). Render may change or delete any of
// them but the last, which is set again as the status line is written: a client that does not
// know the API's error format tells a duplicate in progress, a reused key, an uncertain outcome
// and a store outage apart by it (runtime/idemclient does). Render must write the status line:
// p.Status, unless the API answers that refusal with another on purpose. r is the refused request (its headers: an interaction id to echo,
// say); its body has been read. Render runs on the request's goroutine and must not keep w or r.
//
// The detail is the runtime's English sentence for the client (it names what to fix); a
// Renderer maps Code to the API's own error codes. Problem.Code is one of the runtime's codes
// ([ProblemCodes]) or, for a *Problem a handler returned as its error, whatever that handler set.
type Renderer interface {
	Render(w http.ResponseWriter, r *http.Request, p *Problem) error
}

// RendererFunc is a function that is a [Renderer].
type RendererFunc func(w http.ResponseWriter, r *http.Request, p *Problem) error

// Render calls f.
func (f RendererFunc) Render(w http.ResponseWriter, r *http.Request, p *Problem) error {
	return f(w, r, p)
}

// ProblemRenderer writes refusals as RFC 9457 problems, application/problem+json: the default.
var ProblemRenderer Renderer = RendererFunc(func(w http.ResponseWriter, _ *http.Request, p *Problem) error {
	return p.WriteTo(w)
})

// Route names one operation of an API and where it is served, for [CaptureOptions.Operations].
type Route struct {
	Operation string // operationId as written in the spec
	Route     string // "POST /v1/payments/{payment_id}"
}

// CaptureOptions configure [CaptureWith].
type CaptureOptions struct {
	// MaxBody caps request bodies in bytes (DefaultMaxRequestBody when zero or less); a larger one
	// is answered 413 body-too-large.
	MaxBody int64
	// Renderer writes every refusal of the server's requests (nil: RFC 9457 problems), unless
	// OperationRenderers has one for the refused request's operation.
	Renderer Renderer
	// OperationRenderers override Renderer per operation, keyed by operationId as written in the
	// spec. A request is an operation's when its method and path match the operation's route
	// (Operations, and the policies' routes); a refusal of a request no operation matches (404,
	// 405) is Renderer's.
	OperationRenderers map[string]Renderer
	// Operations are every operation's id and route, so that OperationRenderers reach the
	// operations that are not idempotent too. Generated code lists them all.
	Operations []Route
	// BaseURL is the prefix the router serves the operations' routes under (the wiring's
	// BaseURL). The edge answers a retry of a completed key before the router ([EdgeRule]) only
	// for a request whose path is an operation's route under it exactly.
	BaseURL string
	// RequireRenderer names the operations whose spec says their refusals are the API's own
	// (x-idempotency renderer: custom): CaptureWith panics when one of them would be answered
	// with a problem, because neither Renderer nor its OperationRenderers entry is set.
	RequireRenderer []string
}

// CaptureWith is [CaptureFor] with options: besides keeping the body and logging refusals, it
// makes every refusal of the server's requests go through the API's [Renderer] (see [Render]),
// so a spec's declared error schema is what clients get. Generated code calls it with the
// options of the generated wiring (IdempotentHandlerOptions.Renderer and OperationRenderers).
//
// It panics when an operation of RequireRenderer has no renderer: a setup mistake no request can
// fix, reported once at startup as regexp.MustCompile does.
func CaptureWith(store *idem.Store, policies []*Policy, o CaptureOptions) func(http.Handler) http.Handler {
	l := newRefusalLog(store, policies)
	l.renderer, l.operationRenderers = o.Renderer, o.OperationRenderers
	l.routes = append(l.routes, o.Operations...)
	l.edge = newEdge(store, o.BaseURL, policies, o.Operations)
	var missing []string
	for _, op := range o.RequireRenderer {
		if o.Renderer == nil && o.OperationRenderers[op] == nil {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		panic(fmt.Sprintf("idemhttp: the spec says the refusals of %s are the API's own (x-idempotency renderer: custom), but no Renderer is configured for them: set IdempotentHandlerOptions.Renderer (or OperationRenderers), or remove renderer: custom and answer RFC 9457 problems",
			strings.Join(missing, ", ")))
	}
	return capture(o.MaxBody, l)
}

// Render writes p, a refusal of r, through the renderer the server was configured with
// ([CaptureWith]; RFC 9457 problems when none is, or when r was not captured), after setting the
// headers every refusal carries: Cache-Control: no-store, Retry-After when p has one, and the
// echo headers ([Policy.EchoHeaders]) of r's operation. It does not log: [Refuse] does both.
func Render(w http.ResponseWriter, r *http.Request, p *Problem) error {
	if b, ok := BodyFromContext(r.Context()); ok && b.log != nil {
		return b.log.render(w, r, nil, p)
	}
	return p.WriteTo(w)
}

// render writes p for r through op's renderer; op is the operation's policy when the caller
// knows it, else it is looked up from r's method and path.
func (l *refusalLog) render(w http.ResponseWriter, r *http.Request, op *Policy, p *Problem) error {
	id := ""
	if op == nil {
		op = routeOf(l.policies, r.Method, r.URL.Path)
	}
	if op != nil {
		id = op.Operation
		echoHeaders(w.Header(), r.Header, op.EchoHeaders)
	} else if len(l.operationRenderers) > 0 {
		id = l.operationOf(r.Method, r.URL.Path)
	}
	rd := l.renderer
	if custom := l.operationRenderers[id]; custom != nil && id != "" {
		rd = custom
	}
	if rd == nil {
		return p.WriteTo(w)
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(idem.RoundRetryAfter(p.RetryAfter)/time.Second), 10))
	}
	setRefusal(h, p)
	if err := rd.Render(&refusalWriter{ResponseWriter: w, p: p}, r, p); err != nil {
		l.logger.ErrorContext(r.Context(), "idem: the API's Renderer failed to write a refusal", "status", p.Status, "code", p.Code,
			"operation", id, "error", err)
		return err
	}
	return nil
}

// refusalWriter is the writer a Renderer gets: it sets Idempotency-Refusal again as the status
// line is written, so a renderer that rebuilt the header from scratch still answers with it.
type refusalWriter struct {
	http.ResponseWriter
	p     *Problem
	wrote bool
}

func (rw *refusalWriter) WriteHeader(status int) {
	if !rw.wrote {
		rw.wrote = true
		setRefusal(rw.Header(), rw.p)
	}
	rw.ResponseWriter.WriteHeader(status)
}

func (rw *refusalWriter) Write(b []byte) (int, error) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush, deadlines).
func (rw *refusalWriter) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// operationOf is the id of the operation of l.routes whose route method and path match, or "".
func (l *refusalLog) operationOf(method, path string) string {
	best, bestParams := "", -1
	for _, rt := range l.routes {
		if params, ok := routeMatches(rt.Route, method, path); ok && (best == "" || params < bestParams) {
			best, bestParams = rt.Operation, params
		}
	}
	return best
}

// echoHeaders sets each of names in dst to the request's own values (src), leaving dst's value
// when the request has none: an answer carries the current request's interaction id, never a
// stored one.
func echoHeaders(dst, src http.Header, names []string) {
	for _, name := range names {
		if vs := src.Values(name); len(vs) > 0 {
			dst[http.CanonicalHeaderKey(name)] = append([]string(nil), vs...)
		}
	}
}
