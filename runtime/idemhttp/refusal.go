package idemhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// A refusal is a 4xx problem a generated server answers before any key is claimed: a missing
// or malformed key, a parameter or body oapi-codegen could not bind, a body of an undeclared
// media type or over the size cap. It is the client's to fix, so it is no warning; but a
// developer asking why a request was refused finds it in the log at debug level, with the code
// the client got and the operation.

// refusalLog is what CaptureFor shares among its requests: where their refusals are logged, and
// which operations' bodies oapi-codegen binds more than once.
type refusalLog struct {
	logger   *slog.Logger
	policies []*Policy
	// twice are the policies that declare two JSON media types one Content-Type can match
	// (application/json and application/json; charset=utf-8): see [bindsTwice].
	twice []*Policy
	// renderer and operationRenderers write refusals in the API's format (CaptureWith); routes
	// find the operation of a request that no policy's route matches.
	renderer           Renderer
	operationRenderers map[string]Renderer
	routes             []Route
	// edge answers retries of completed keys before the router (edge.go; CaptureWith); nil when
	// no policy can be answered there.
	edge *edge
}

// CaptureFor is [Capture] for a generated server: besides keeping the body, it lets every
// refusal of the request be logged at debug level through store's Config.Logger, with the
// operation of policies whose route the request's path is ([Refuse]; Capture's own 413 and
// [Handle]'s refusals are logged the same way).
//
// It also makes a JSON body bindable more than once. oapi-codegen's strict handler, for an
// operation that declares several media types, decodes the body once for each declared type
// the request's Content-Type starts with: a body sent as application/json; charset=utf-8 to an
// operation that declares it and application/json is decoded twice, and the second decode,
// finding the body read, failed with 400. For such an operation the body carries its decoded
// value (ValidatedValue, the hook oapi-codegen binds from without reading the body), so every
// decode binds the same value.
func CaptureFor(store *idem.Store, policies []*Policy, max int64) func(http.Handler) http.Handler {
	return capture(max, newRefusalLog(store, policies))
}

// newRefusalLog is the state CaptureFor and CaptureWith share among their requests.
func newRefusalLog(store *idem.Store, policies []*Policy) *refusalLog {
	l := &refusalLog{logger: store.Config().Logger, policies: policies}
	for _, p := range policies {
		json := 0
		for _, t := range p.BodyTypes {
			if isJSON(t) {
				json++
			}
		}
		if json > 1 {
			l.twice = append(l.twice, p)
		}
	}
	return l
}

// bindsTwice says whether oapi-codegen decodes a body of contentType more than once for an
// operation of l.twice at method and path.
func (l *refusalLog) bindsTwice(method, path, contentType string) bool {
	if len(l.twice) == 0 || !isJSON(contentType) {
		return false
	}
	p := routeOf(l.twice, method, path)
	if p == nil {
		return false
	}
	n := 0
	for _, t := range p.BodyTypes {
		if isJSON(t) && strings.HasPrefix(contentType, t) {
			n++
		}
	}
	return n > 1
}

// isJSON says whether media type mt is JSON: application/json or any +json type.
func isJSON(mt string) bool { return idemwire.ClassifyMediaType(mt) == idemwire.MediaJSON }

// valuedBody is a request body that also carries its decoded JSON value.
type valuedBody struct {
	io.ReadCloser
	value any
}

// ValidatedValue is the body's decoded value: oapi-codegen's strict handlers bind it instead of
// reading the body.
func (b valuedBody) ValidatedValue() any { return b.value }

// decodeJSON decodes raw, one JSON value, as oapi-codegen's binding expects a validated value.
func decodeJSON(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	return v, true
}

// Refuse writes p, a refusal of r answered by generated code before the runtime ran (binding,
// decoding), through the server's [Renderer] ([Render]), and logs it at debug level when r was
// captured by [CaptureFor] or [CaptureWith]: "idem: request refused" with its status, code,
// method and, when the path is an idempotent operation's, the operation and its route. The path
// itself is not logged: a key may be a path parameter.
func Refuse(w http.ResponseWriter, r *http.Request, p *Problem) {
	if b, ok := BodyFromContext(r.Context()); ok && b.log != nil {
		b.log.refused(r.Context(), nil, b.method, b.path, p)
	}
	_ = Render(w, r, p)
}

// refused logs p; op is the operation's policy when the caller knows it.
func (l *refusalLog) refused(ctx context.Context, op *Policy, method, path string, p *Problem) {
	if !l.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	if op == nil {
		op = routeOf(l.policies, method, path)
	}
	attrs := []any{"status", p.Status, "code", p.Code, "method", method}
	if op != nil {
		attrs = append(attrs, "operation", op.Operation, "route", op.Route)
	}
	l.logger.DebugContext(ctx, "idem: request refused", attrs...)
}

// logRefused is Handle's refusal log: through the CaptureFor log when the request has one, else
// through logger, naming p's operation.
func logRefused(ctx context.Context, logger *slog.Logger, op *Policy, p *Problem) {
	if b, ok := BodyFromContext(ctx); ok && b.log != nil {
		b.log.refused(ctx, op, b.method, b.path, p)
		return
	}
	if logger.Enabled(ctx, slog.LevelDebug) {
		logger.DebugContext(ctx, "idem: request refused", "status", p.Status, "code", p.Code,
			"operation", op.Operation, "route", op.Route)
	}
}

// routeOf returns the policy whose route ("POST /v1/payments/{payment_id}") method and path
// are, or nil (see [routeMatches]).
func routeOf(policies []*Policy, method, path string) *Policy {
	var best *Policy
	bestParams := -1
	for _, p := range policies {
		if params, ok := routeMatches(p.Route, method, path); ok && (best == nil || params < bestParams) {
			best, bestParams = p, params
		}
	}
	return best
}

// routeMatches says whether route ("POST /v1/payments/{payment_id}") is method and path, and how
// many of its segments are parameters. The route's segments match the path's last ones, so a
// BaseURL the server is mounted under does not hide the operation; of several routes that match,
// the caller prefers the one with the fewest parameters (a literal segment beats a parameter).
func routeMatches(route, method, path string) (params int, ok bool) {
	m, tmpl, ok := strings.Cut(route, " ")
	if !ok || m != method {
		return 0, false
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	want := strings.Split(strings.Trim(tmpl, "/"), "/")
	if len(want) > len(segs) {
		return 0, false
	}
	got := segs[len(segs)-len(want):]
	for i, w := range want {
		if strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") && got[i] != "" {
			params++
		} else if w != got[i] {
			return 0, false
		}
	}
	return params, true
}
