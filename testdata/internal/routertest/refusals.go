package routertest

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// logRecorder is the store's Config.Logger handler in Run: it keeps every record, debug ones
// included, so a case can read what the server logged.
type logRecorder struct {
	mu      sync.Mutex
	records []loggedRecord
}

// loggedRecord is one record: its level, message and attributes as text.
type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, rec)
	return nil
}

func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// refusals returns the debug records of refusals of operation, by code.
func (l *logRecorder) refusals(operation string) map[string]loggedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]loggedRecord{}
	for _, r := range l.records {
		if r.level == slog.LevelDebug && r.msg == "idem: request refused" && r.attrs["operation"] == operation {
			out[r.attrs["code"]] = r
		}
	}
	return out
}

// has says whether a record msg names key hash and has early as its early attribute ("" for
// none).
func (l *logRecorder) has(msg, hash, early string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if r.msg == msg && r.attrs["key_hash"] == hash && r.attrs["early"] == early {
			return true
		}
	}
	return false
}

var refusalCases = []testCase{
	{"refusals-logged-at-debug", func(t *testing.T, e *env, c *client) {
		// Every refusal of updatePayment the server answers, whether oapi-codegen's binding, a
		// decoder, the body capture or the runtime found it, is one debug record with its code
		// and the operation. No other case refuses updatePayment.
		patch := "/v1/payments/" + c.tenant + "-x"
		sent := []struct {
			what   string
			a      answer
			status int
			code   string
		}{
			{"no key", c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": 1}`), 400, "key-missing"},
			{"two keys", c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": 1}`, "k1", "k2"), 400, "key-invalid"},
			{"a string amount", c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": "one"}`, "k"), 400, "request-invalid"},
			{"data after the JSON value", c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": 1}GARBAGE`, "k"), 400, "body-invalid"},
			{"a text/plain body", c.sendAs(t, http.MethodPatch, patch, "text/plain", `{"amount": 1}`, "k"), 415, "media-type-unsupported"},
			{"a body over 1 MiB", c.sendAs(t, http.MethodPatch, patch, PatchType, `{"amount": 1, "pad": "`+strings.Repeat("p", 1<<20)+`"}`, "k"), 413, "body-too-large"},
		}
		logged := e.logs.refusals("updatePayment")
		for _, s := range sent {
			c.problem(t, s.what, s.a, s.status, s.code)
			r, ok := logged[s.code]
			if !ok {
				t.Errorf("%s: %s was answered %d %s, but no debug record \"idem: request refused\" names updatePayment and %s; got %v",
					e.router, s.what, s.a.Status, s.code, s.code, slices.Collect(mapsKeys(logged)))
				continue
			}
			if r.attrs["route"] != "PATCH /v1/payments/{payment_id}" || r.attrs["status"] == "" {
				t.Errorf("%s: %s: the record %v lacks the route or the status", e.router, s.what, r.attrs)
			}
		}
	}},
}

func mapsKeys(m map[string]loggedRecord) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
