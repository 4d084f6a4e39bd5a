package idemhttp

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
)

// A refusal is a 4xx problem a generated server answers before any key is claimed: a missing
// or malformed key, a parameter or body oapi-codegen could not bind, a body of an undeclared
// media type or over the size cap. It is the client's to fix, so it is no warning; but a
// developer asking why a request was refused finds it in the log at debug level, with the code
// the client got and the operation.

// refusalLog is what CaptureFor keeps in a request's context for logging its refusals.
type refusalLog struct {
	logger   *slog.Logger
	policies []*Policy
	method   string
	path     string
}

// CaptureFor is [Capture] for a generated server: besides keeping the body, it lets every
// refusal of the request be logged at debug level through store's Config.Logger, with the
// operation of policies whose route the request's path is ([Refuse]; Capture's own 413 and
// [Handle]'s refusals are logged the same way).
func CaptureFor(store *idem.Store, policies []*Policy, max int64) func(http.Handler) http.Handler {
	return capture(max, func(r *http.Request) *refusalLog {
		return &refusalLog{logger: store.Config().Logger, policies: policies, method: r.Method, path: r.URL.Path}
	})
}

// Refuse writes p, a refusal of r answered by generated code before the runtime ran (binding,
// decoding), and logs it at debug level when r was captured by [CaptureFor]: "idem: request
// refused" with its status, code, method and, when the path is an idempotent operation's, the
// operation and its route. The path itself is not logged: a key may be a path parameter.
func Refuse(w http.ResponseWriter, r *http.Request, p *Problem) {
	if b, ok := BodyFromContext(r.Context()); ok && b.log != nil {
		b.log.refused(r.Context(), nil, p)
	}
	_ = p.WriteTo(w)
}

// refused logs p; op is the operation's policy when the caller knows it.
func (l *refusalLog) refused(ctx context.Context, op *Policy, p *Problem) {
	if !l.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	if op == nil {
		op = routeOf(l.policies, l.method, l.path)
	}
	attrs := []any{"status", p.Status, "code", p.Code, "method", l.method}
	if op != nil {
		attrs = append(attrs, "operation", op.Operation, "route", op.Route)
	}
	l.logger.DebugContext(ctx, "idem: request refused", attrs...)
}

// logRefused is Handle's refusal log: through the CaptureFor log when the request has one, else
// through logger, naming p's operation.
func logRefused(ctx context.Context, logger *slog.Logger, op *Policy, p *Problem) {
	if b, ok := BodyFromContext(ctx); ok && b.log != nil {
		b.log.refused(ctx, op, p)
		return
	}
	if logger.Enabled(ctx, slog.LevelDebug) {
		logger.DebugContext(ctx, "idem: request refused", "status", p.Status, "code", p.Code,
			"operation", op.Operation, "route", op.Route)
	}
}

// routeOf returns the policy whose route ("POST /v1/payments/{payment_id}") method and path
// are, or nil. The route's segments match the path's last ones, so a BaseURL the server is
// mounted under does not hide the operation; a literal segment beats a parameter.
func routeOf(policies []*Policy, method, path string) *Policy {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var best *Policy
	bestParams := -1
	for _, p := range policies {
		m, tmpl, ok := strings.Cut(p.Route, " ")
		if !ok || m != method {
			continue
		}
		want := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(want) > len(segs) {
			continue
		}
		got := segs[len(segs)-len(want):]
		params, match := 0, true
		for i, w := range want {
			if strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") && got[i] != "" {
				params++
			} else if w != got[i] {
				match = false
				break
			}
		}
		if match && (best == nil || params < bestParams) {
			best, bestParams = p, params
		}
	}
	return best
}
