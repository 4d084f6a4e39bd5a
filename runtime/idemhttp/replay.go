package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// HeaderReplayed marks an answer that repeats a stored outcome.
const HeaderReplayed = "Idempotent-Replayed"

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
func NeverReplayed(name string) bool {
	name = http.CanonicalHeaderKey(name)
	return neverReplayed[name] || strings.HasPrefix(name, "Proxy-")
}

// replayAllowed says whether header name of a stored answer is kept for its replays: it is on
// the default allow-list or one of lists, and not [NeverReplayed].
func replayAllowed(name string, lists ...[]string) bool {
	if NeverReplayed(name) {
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
		if strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// replayHeaders is what h keeps for replays under p.
func replayHeaders(h http.Header, p *Policy) http.Header {
	out := http.Header{}
	for k, vs := range h {
		if replayAllowed(k, p.DeclaredHeaders, p.ReplayHeaders) {
			out[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// WriteTo writes the result: the outcome (with Idempotent-Replayed: true on replays, only
// allow-listed headers of a stored one) or the problem. A fresh execution, and a replay that
// Handle answered anew through Op.Replay, are written as the handler produced them, with all
// their headers.
func (r *Result) WriteTo(w http.ResponseWriter) error {
	switch r.Kind {
	case ResultProblem:
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
			if r.Kind == ResultExecuted || r.recomputed || replayAllowed(k, r.declared, r.allow) {
				h[http.CanonicalHeaderKey(k)] = take(vs...)
			}
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
