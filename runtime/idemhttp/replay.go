package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemwire"
)

// HeaderReplayed marks an answer that repeats a stored outcome (idemwire.HeaderReplayed).
const HeaderReplayed = idemwire.HeaderReplayed

// defaultReplayHeaders are replayed for every operation; a policy's DeclaredHeaders and
// ReplayHeaders add to them.
var defaultReplayHeaders = []string{"Content-Type", "Content-Language", "Location", "ETag", "Last-Modified", "Link", HeaderBodyOmitted}

// neverReplayed are dropped even when a policy lists them or the spec declares them:
// credentials, cookies and hop-by-hop headers belong to one exchange, not to the outcome. Every
// Proxy-* header is dropped too (see [NeverReplayed]).
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true, "Www-Authenticate": true, "Cookie": true,
	"Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true, HeaderReplayed: true,
}

// NeverReplayed reports whether a stored answer's header name is dropped whatever the policy
// says: Set-Cookie, Authorization and the other credentials, hop-by-hop headers (Connection,
// Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade), Content-Length (the replay's
// own) and Idempotent-Replayed. The generator leaves these out of [Policy.DeclaredHeaders];
// idemgen lint warns about such a header declared on a stored response, and refuses it in
// replayHeaders.
func NeverReplayed(name string) bool { return neverReplayedCanonical(http.CanonicalHeaderKey(name)) }

// neverReplayedCanonical is NeverReplayed for a name in canonical form.
func neverReplayedCanonical(name string) bool {
	return neverReplayed[name] || strings.HasPrefix(name, "Proxy-")
}

// canonicalKey is http.CanonicalHeaderKey(k). The names answers mostly carry, already in
// canonical form, are recognised by a comparison, where the general check reads every byte
// through a table: every header of every answer is canonicalised once on its way out.
func canonicalKey(k string) string {
	switch k {
	case "Content-Type", "Location", "Content-Language", "Etag", "Last-Modified", "Link", "Cache-Control",
		"Retry-After", HeaderReplayed, HeaderBodyOmitted:
		return k
	}
	return http.CanonicalHeaderKey(k)
}

// replayAllowed says whether header name (in canonical form: canonicalKey) of a stored answer is
// kept for its replays: it is on the default allow-list or one of lists, and not
// [NeverReplayed].
func replayAllowed(name string, lists ...[]string) bool {
	if neverReplayedCanonical(name) {
		return false
	}
	if listed(defaultReplayHeaders, name) {
		return true
	}
	for _, list := range lists {
		if listed(list, name) {
			return true
		}
	}
	return false
}

func listed(list []string, name string) bool {
	for _, a := range list {
		if a == name || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// replayHeaders is what h keeps for replays under p: h itself when it keeps every header, each
// under its canonical name with a value (most answers: Content-Type, Location), which the caller
// then must not change; otherwise copies of the values kept (an empty list kept as nil), all in
// one backing array, under canonical names.
func replayHeaders(h http.Header, p *Policy) http.Header {
	if keepsAll(h, p) {
		return h
	}
	var out http.Header
	var vals []string
	for k, vs := range h {
		name := canonicalKey(k)
		if !replayAllowed(name, p.DeclaredHeaders, p.ReplayHeaders) {
			continue
		}
		if out == nil {
			out = make(http.Header, len(h))
			vals = make([]string, 0, len(h)) // a value per header, as most have
		}
		if len(vs) == 0 {
			out[name] = nil
			continue
		}
		i := len(vals)
		vals = append(vals, vs...)
		out[name] = vals[i:len(vals):len(vals)]
	}
	return out
}

// keepsAll says whether replayHeaders keeps every header of h as it is.
func keepsAll(h http.Header, p *Policy) bool {
	for k, vs := range h {
		if len(vs) == 0 || canonicalKey(k) != k || !replayAllowed(k, p.DeclaredHeaders, p.ReplayHeaders) {
			return false
		}
	}
	return true
}

// WriteTo writes the result: the outcome (with Idempotent-Replayed: true on replays, only
// allow-listed headers of a stored one) or the problem. A fresh execution, and a replay that
// Handle answered anew through Op.Replay, are written as the handler produced them, with all
// their headers.
func (r *Result) WriteTo(w http.ResponseWriter) error {
	switch r.Kind {
	case ResultProblem:
		if r.log != nil && r.req != nil {
			return r.log.render(w, r.req.WithContext(r.ctx), r.op, r.Problem)
		}
		return r.Problem.WriteTo(w)
	case ResultReplayed, ResultExecuted:
		if r.Outcome == nil {
			return errors.New("idem: Result.WriteTo: no outcome to write")
		}
		h := w.Header()
		// The header gets copies of the outcome's values (an outcome may be the replay cache's,
		// shared by every replay of its key), all in one allocation: every answer is written here.
		n := 2
		for _, vs := range r.Outcome.Header {
			n += len(vs)
		}
		vals := make([]string, 0, n)
		take := func(vs ...string) []string {
			i := len(vals)
			vals = append(vals, vs...)
			return vals[i:len(vals):len(vals)]
		}
		for k, vs := range r.Outcome.Header {
			name := canonicalKey(k)
			if r.Kind == ResultReplayed && !r.recomputed && listed(r.echo, name) {
				continue // the current request's, below
			}
			if r.Kind == ResultExecuted || r.recomputed || replayAllowed(name, r.declared, r.allow) {
				h[name] = take(vs...)
			}
		}
		if r.Kind == ResultReplayed && r.req != nil {
			echoHeaders(h, r.req.Header, r.echo)
		}
		if r.Kind == ResultReplayed {
			h[HeaderReplayed] = take("true")
			// A replay answers one client's retry of one key: no shared cache may keep it. The
			// handler's own Cache-Control is not replayed, so this holds whatever it said.
			h["Cache-Control"] = take("no-store")
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
