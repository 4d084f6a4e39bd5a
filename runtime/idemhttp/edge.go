package idemhttp

import (
	"context"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Claims at the edge. A retry of a completed key needs nothing of what serving the request anew
// walks through (the router, the binding of its parameters and body, the request's validation,
// the strict server's objects): its fingerprint proves it is the request that passed all of them
// once, and its answer is stored. So [CaptureWith], right after it has read the body, reads the
// request's key, tenant, scope and fingerprint from the request as sent and claims the key there
// ([idem.Store.ClaimAhead]), the claim the handler would make later anyway:
//
//   - a completed key whose fingerprint matches is answered there, exactly as [Handle] would
//     answer it (the stored status, headers and bytes, Idempotent-Replayed, the echo headers, the
//     history count and the replayed event, marked early);
//   - any other claim goes down the stack with the request (idem.WithAhead), where the handler's
//     Do takes it instead of claiming again: a first execution pays no extra round trip, and a key
//     in flight, another fingerprint or an outage is answered by the full path as always, after
//     the request's own refusals (a body refused by validation is still answered 400), in the
//     API's format;
//   - a request answered without reaching its handler (refused by the binding or by validation)
//     gives the claim back (Ahead.Drop) before its answer leaves: an invalid request binds its key
//     only while it is being refused. A body that the policy's own ValidateBody refuses is never
//     claimed.
//
// An operation takes part when the generated code gives its policy an [EdgeRule]: it stores whole
// responses (a reference or marker replay needs the typed request), it is no webhook receiver
// (every delivery's signature is checked), its key is a header, and every scope and fingerprint
// part is a string header or path parameter, which the binding keeps as the request sends it.
// The route must be the request's path exactly (under the wiring's BaseURL, no escaped bytes),
// and no other operation's route may be a closer match, so the edge claims only for what the
// router would send to that operation.

// EdgeRule is how the edge reads an operation's scope and fingerprint parts from the request as
// sent: their names, in the order [Op.Scope] and [Op.Parts] have them ("operation",
// "header:X-Account", "path:payment_id"). Generated code sets [Policy.Edge] to one when every
// part is a string header or path parameter; see the comment above.
type EdgeRule struct {
	Scope []string
	Parts []string
}

// edgeRoute is one operation whose completed keys the edge replays: its policy and its route's
// path split into segments ("{payment_id}" for a parameter).
type edgeRoute struct {
	p        *Policy
	method   string
	segments []string
	params   int
}

// edge is CaptureWith's replay check: the routes it answers for, and every operation's route,
// which decides whether another operation is the closer match for a path.
type edge struct {
	store  *idem.Store
	base   string
	routes []edgeRoute
	all    []edgeRoute // every operation's route (policy nil for one that is not idempotent)
}

// handlerCtxKey keeps the context the strict handler will pass a request's handler
// ([WithHandlerContext]).
type handlerCtxKey struct{}

// WithHandlerContext records in ctx, a request's context, the context its strict handler will
// pass as ctx: the framework's own (a *gin.Context, an iris.Context), whose Value finds what the
// framework's middleware stored (c.Set). The edge asks Config.Tenant with it, so a tenant kept
// there is the same for a replay answered before the router as for the full path. The generated
// wiring of such frameworks sets it; others need not.
func WithHandlerContext(ctx, handler context.Context) context.Context {
	return context.WithValue(ctx, handlerCtxKey{}, handler)
}

// newEdge is the edge for policies served under base, or nil when none can be replayed there.
func newEdge(store *idem.Store, base string, policies []*Policy, operations []Route) *edge {
	e := &edge{store: store, base: strings.TrimSuffix(base, "/")}
	for _, p := range policies {
		if p.Edge != nil && (p.Storage == 0 || p.Storage == StorageResponse) && p.Key.Header != "" {
			e.routes = append(e.routes, splitRoute(p.Route, p))
		}
	}
	if len(e.routes) == 0 {
		return nil
	}
	for _, op := range operations {
		e.all = append(e.all, splitRoute(op.Route, nil))
	}
	for _, p := range policies {
		e.all = append(e.all, splitRoute(p.Route, p))
	}
	return e
}

func splitRoute(route string, p *Policy) edgeRoute {
	method, path, _ := strings.Cut(route, " ")
	r := edgeRoute{p: p, method: method, segments: strings.Split(strings.Trim(path, "/"), "/")}
	for _, s := range r.segments {
		if isParam(s) {
			r.params++
		}
	}
	return r
}

func isParam(segment string) bool {
	return len(segment) > 2 && segment[0] == '{' && segment[len(segment)-1] == '}'
}

// match says whether path (the request's, below the base) is r's route exactly.
func (r *edgeRoute) match(method, path string) bool {
	if method != r.method {
		return false
	}
	rest := strings.TrimPrefix(path, "/")
	for i, want := range r.segments {
		seg, more, found := strings.Cut(rest, "/")
		if seg == "" || (!isParam(want) && seg != want) || found != (i < len(r.segments)-1) {
			return false
		}
		rest = more
	}
	return true
}

// route is the operation of r the edge may answer for, or nil.
func (e *edge) route(r *http.Request) *edgeRoute {
	path := r.URL.Path
	if !strings.HasPrefix(path, e.base) || strings.IndexByte(r.URL.EscapedPath(), '%') >= 0 {
		return nil
	}
	path = path[len(e.base):]
	var found *edgeRoute
	for i := range e.routes {
		if e.routes[i].match(r.Method, path) {
			found = &e.routes[i]
			break
		}
	}
	if found == nil || found.params == 0 {
		return found
	}
	for i := range e.all {
		if o := &e.all[i]; o.params < found.params && o.match(r.Method, path) {
			return nil // a route with fewer parameters is the router's choice
		}
	}
	return found
}

// serve claims r's key ahead (idem.Store.ClaimAhead) when the edge can read the request, and
// says whether it answered r: a retry of a completed key is answered here, and any other claim
// is handed to next in the request's context, for the handler's Do to take (WithAhead), and
// given back if the request is answered without it. ctx holds r's captured body.
func (e *edge) serve(ctx context.Context, w http.ResponseWriter, r *http.Request, body *Body, next http.Handler) bool {
	p, do := e.params(ctx, r, body)
	if do == nil {
		return false
	}
	done, ahead := e.store.ClaimAhead(ctx, do)
	switch {
	case done != nil:
		res := &Result{Kind: ResultReplayed, Outcome: done.Outcome, declared: p.DeclaredHeaders, allow: p.ReplayHeaders}
		res.Bind(ctx, p)
		_ = res.WriteTo(w) // as the strict server's response visitor does: the client is gone otherwise
		return true
	case ahead == nil:
		return false
	}
	defer ahead.Drop(ctx)
	next.ServeHTTP(w, r.WithContext(idem.WithAhead(ctx, ahead)))
	return true
}

// params are the policy of r's operation and the claim's params, read from r as sent; do is nil
// when the edge cannot read r exactly as the binding would (and then r takes the full path).
func (e *edge) params(ctx context.Context, r *http.Request, body *Body) (p *Policy, do *idem.DoParams) {
	rt := e.route(r)
	if rt == nil {
		return nil, nil
	}
	p = rt.p
	key, prob := ParseKey(r.Header.Values(p.Key.Header), p.Key)
	if prob != nil || key == "" {
		return nil, nil
	}
	tctx := ctx
	if h, ok := ctx.Value(handlerCtxKey{}).(context.Context); ok {
		tctx = h
	}
	tenant, err := tenantOf(tctx, e.store.Config(), p, key)
	if err != nil || notText(tenant) != "" {
		return nil, nil
	}
	var room [4]ScopePart
	scope := room[:0]
	for _, name := range p.Edge.Scope {
		v := p.Operation
		if name != scopeOperation {
			s, _, ok := rt.value(r, name)
			if !ok || notText(s) != "" {
				return nil, nil
			}
			v = s // an absent header is "", as its nil field's text
		}
		scope = append(scope, ScopePart{Name: name, Value: v})
	}
	fp := idem.NewFingerprinter(p.Route)
	for _, name := range p.Edge.Parts {
		s, present, ok := rt.value(r, name)
		if !ok || notText(s) != "" {
			return nil, nil
		}
		v := &s
		if !present {
			v = nil // an absent optional header, framed as its nil field is
		}
		if err := fp.Add(name, v); err != nil {
			return nil, nil
		}
	}
	if mediaTypeProblem(ctx, p) != nil {
		return nil, nil // the full path answers 415, whatever the fingerprint
	}
	framed := fp.Framed()
	if !p.NoFingerprint && len(body.Bytes) > 0 && fp.RawBody(body.ContentType, body.Bytes, p.Exclude...) != nil {
		return nil, nil
	}
	if p.ValidateBody != nil && p.ValidateBody(ctx, body.ContentType, body.Bytes) != nil {
		return nil, nil // an invalid body never binds a key: the full path refuses it
	}
	sum := fp.Sum()
	if !p.NoFingerprint && fp.Framed() != nil {
		// For the handler's fingerprint (Op.request), which frames the parts as bound, and the
		// same body: when its frames match these, the sum is this one. (A body large enough to
		// be hashed as it streams reuses the memory framed was read from: no reuse then.)
		body.print = bodyPrint{p: p, framed: framed, bytes: body.Bytes, contentType: body.ContentType, sum: sum}
	}
	return p, p.doParams(tenant, scope, key, sum)
}

// value is the part name ("header:X-Account", "path:payment_id") of r, whose path matched rt: a
// header's one value (present false when it has none), or the path segment. ok is false for a
// header sent more than once, which the binding refuses.
func (rt *edgeRoute) value(r *http.Request, name string) (v string, present, ok bool) {
	kind, param, _ := strings.Cut(name, ":")
	switch kind {
	case "header":
		switch vs := r.Header.Values(param); len(vs) {
		case 0:
			return "", false, true
		case 1:
			return vs[0], true, true
		}
		return "", false, false
	case "path":
		rest := strings.TrimPrefix(r.URL.Path, "/")
		segs := strings.Split(rest, "/")
		segs = segs[len(segs)-len(rt.segments):]
		for i, want := range rt.segments {
			if want == "{"+param+"}" {
				return segs[i], true, true
			}
		}
	}
	return "", false, false
}
