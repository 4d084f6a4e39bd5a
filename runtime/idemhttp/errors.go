package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"strings"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// The answers a generated server gives outside the idempotent path: binding and decoding
// errors, unknown routes and a handler's unexpected error. Each is a problem like the runtime's
// own, and none carries Go, SQL or driver text.

// NotImplemented is the 501 not-implemented problem for operation (its operationId), which the
// server does not implement: the generated UnimplementedIdempotentServer returns it as the
// error of every operation its embedder does not define, so an unserved operation answers a
// problem (through the server's Renderer) instead of panicking on a nil method.
func NotImplemented(operation string) *Problem {
	return newProblem(http.StatusNotImplemented, CodeNotImplemented, fmt.Sprintf(
		"this server does not implement %s yet: nothing was done, and a retry will get the same answer until it does", shortened(operation)))
}

// RequestErrorHandler is for oapi-codegen's StrictHTTPServerOptions.RequestErrorHandlerFunc: a
// body that cannot be decoded into the operation's request type is answered 400
// request-invalid, saying where the body went wrong without Go type names.
func RequestErrorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if prob := BodyProblem(r.Context()); prob != nil {
		Refuse(w, r, prob)
		return
	}
	if prob := UndecodableTypeProblem(r.Context()); prob != nil {
		Refuse(w, r, prob)
		return
	}
	Refuse(w, r, RequestProblem(err))
}

// UndecodableTypeProblem is the 415 media-type-unsupported problem when the body Capture kept
// in ctx was sent without a Content-Type, or with one that no decoder of a typed body reads
// (neither JSON, application/json or any +json type, nor a form nor multipart), or nil. A
// router's decoder that refused such a body (echo's binder, fiber's body parser) refused it
// for its media type, so the client gets the same 415 problem the runtime answers when the
// decoder lets the body through.
func UndecodableTypeProblem(ctx context.Context) *Problem {
	b, ok := BodyFromContext(ctx)
	if !ok || len(b.Bytes) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(b.ContentType)
	switch {
	case err != nil:
		return newProblem(http.StatusUnsupportedMediaType, CodeMediaTypeUnsupported,
			"the request body has no valid Content-Type: send it with the media type the API declares for it")
	case idemwire.MediaClassOf(mt).Decodable():
		return nil
	}
	return newProblem(http.StatusUnsupportedMediaType, CodeMediaTypeUnsupported, fmt.Sprintf(
		"this operation does not accept a body of %s: send it with the media type the API declares for it", mt))
}

// BodyProblem is the 400 body-invalid problem when the body Capture kept in ctx is not what its
// media type says (invalid JSON, data after the JSON value, a member sent twice), or nil. A body
// the decoder refused is judged by it first, so that every router answers a malformed body the
// same way, whether the decoder or the fingerprint found it.
func BodyProblem(ctx context.Context) *Problem {
	b, ok := BodyFromContext(ctx)
	if !ok || len(b.Bytes) == 0 {
		return nil
	}
	var bad *idem.BodyError
	if _, err := idem.CanonicalBody(b.ContentType, b.Bytes); errors.As(err, &bad) {
		return newProblem(http.StatusBadRequest, CodeBodyInvalid, "the request body is malformed: "+bad.Reason)
	}
	return nil
}

// RequestProblem is the request-invalid problem for a body decoding error.
func RequestProblem(err error) *Problem {
	detail := "the request body does not match what this operation accepts: check it against the API's schema"
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		detail = fmt.Sprintf("the request body is not valid JSON (at byte %d): send one JSON value", syntax.Offset)
	case errors.As(err, &typ) && typ.Field != "":
		detail = fmt.Sprintf("the request body's %q is a JSON %s, which this operation does not accept there: check it against the API's schema", shortened(typ.Field), typ.Value)
	case errors.As(err, &typ):
		detail = fmt.Sprintf("the request body is a JSON %s, which this operation does not accept: check it against the API's schema", typ.Value)
	default:
		// A router that passes the decoder's error on as text only (fiber's strict server)
		// still names the member: its JSON path and kind are taken from encoding/json's
		// message, and nothing else of it is shown.
		if m := unmarshalText.FindStringSubmatch(err.Error()); m != nil {
			detail = fmt.Sprintf("the request body's %q is a JSON %s, which this operation does not accept there: check it against the API's schema", shortened(m[2]), m[1])
		}
	}
	return newProblem(http.StatusBadRequest, CodeRequestInvalid, detail)
}

// unmarshalText matches encoding/json's UnmarshalTypeError text for a struct field: the JSON
// kind, then the field's path after the Go type's name.
var unmarshalText = regexp.MustCompile(`cannot unmarshal (array|bool|number|object|string)(?: [^ ]+)? into Go struct field [^ .]*\.([^ ]+) of type`)

// ParamProblem is the request-invalid problem for a parameter oapi-codegen could not bind
// (sent twice, not of its declared type, a required one missing).
func ParamProblem(param string) *Problem {
	if param == "" {
		return newProblem(http.StatusBadRequest, CodeRequestInvalid,
			"a parameter is missing, repeated or not of its declared type: check the request against the API's schema")
	}
	return newProblem(http.StatusBadRequest, CodeRequestInvalid, fmt.Sprintf(
		"the %s parameter is missing, repeated or not of its declared type: send it once, as the API declares it", shortened(param)))
}

// ResponseErrorHandler returns the handler for oapi-codegen's
// StrictHTTPServerOptions.ResponseErrorHandlerFunc: a handler's error (its work rolled back and
// its key released) is logged with the request's method and path, and answered with the
// problem ErrorProblem gives it (503 store-unavailable for an outage, 503 handler-timeout, 400
// request-invalid for text PostgreSQL cannot hold), else a 500 internal problem. It serves the
// operations that are not idempotent too: a GET during an outage is a 503.
func ResponseErrorHandler(s *idem.Store) func(w http.ResponseWriter, r *http.Request, err error) {
	cfg := s.Config()
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if prob := ErrorProblem(err); prob != nil {
			if prob.Code == CodeStoreUnavailable {
				prob = problemUnavailable(cfg.UnavailableRetryAfter)
			}
			cfg.Logger.WarnContext(r.Context(), "idem: request refused", "method", r.Method, "path", r.URL.Path,
				"code", prob.Code, "error", err)
			_ = Render(w, r, prob)
			return
		}
		level := slog.LevelError
		if r.Context().Err() != nil {
			level = slog.LevelInfo // the client went away; nothing failed on our side
		}
		if errors.Is(err, idem.ErrCommitUnknown) {
			// Not "rolled back": the COMMIT was sent and its answer lost, so the work may well
			// have committed. A retry with the same key tells which (a replay if it did).
			if level == slog.LevelError {
				level = slog.LevelWarn // nothing is known to have failed
			}
			cfg.Logger.Log(r.Context(), level, "request's commit answer was lost: its work may have committed; a retry with the same key replays it if it did",
				"method", r.Method, "path", r.URL.Path, "error", err)
			_ = Render(w, r, problemUnavailable(cfg.UnavailableRetryAfter))
			return
		}
		cfg.Logger.Log(r.Context(), level, "request failed; its work was rolled back", "method", r.Method, "path", r.URL.Path, "error", err)
		_ = Render(w, r, newProblem(http.StatusInternalServerError, CodeInternal,
			"the request failed and changed nothing: retry it (with the same idempotency key, if it has one)"))
	}
}

// Routed answers the requests mux has no operation for with problems (404 not-found, 405
// method-not-allowed with its Allow header) instead of ServeMux's text, and passes every other
// request to next (mux itself, or mux behind its middleware).
func Routed(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			next.ServeHTTP(w, r)
			return
		}
		rec := NewRecorder()
		h.ServeHTTP(rec, r)
		out := rec.Outcome()
		switch out.Status {
		case http.StatusMethodNotAllowed:
			if allow := out.Header.Get("Allow"); allow != "" {
				w.Header().Set("Allow", allow)
			}
			_ = Render(w, r, newProblem(http.StatusMethodNotAllowed, CodeMethodNotAllowed, fmt.Sprintf(
				"this path does not accept %s: use one of %s", shortened(r.Method), strings.TrimSpace(out.Header.Get("Allow")))))
		case http.StatusNotFound:
			_ = Render(w, r, newProblem(http.StatusNotFound, CodeNotFound, "no operation of this API is at this path: check the URL against the API's paths"))
		default: // a redirect (a trailing slash, a cleaned path): as the mux answers it
			for k, vs := range out.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(out.Status)
			_, _ = w.Write(out.Body)
		}
	})
}

// shortened bounds what a problem echoes from the request.
func shortened(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
