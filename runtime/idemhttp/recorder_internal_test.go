package idemhttp

import (
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// TestRecorderKeepsTheHeaderAsSent: the outcome a recorder hands on (take, and Outcome) has the
// header as it was when the status was written, whatever the handler does to the header map
// afterwards, through Header() or through the map it kept from before; and when it did nothing,
// take hands on the map itself, uncopied.
func TestRecorderKeepsTheHeaderAsSent(t *testing.T) {
	t.Parallel()
	sent := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}, "X-Two": {"a", "b"}}
	for _, tc := range []struct {
		name  string
		after func(h http.Header)
	}{
		{"untouched", func(http.Header) {}},
		{"set", func(h http.Header) { h.Set("Location", "/elsewhere") }},
		{"add", func(h http.Header) { h.Add("X-Two", "c") }},
		{"add to a list with room", func(h http.Header) { h["X-Two"] = h["X-Two"][:1]; h.Add("X-Two", "c") }},
		{"del", func(h http.Header) { h.Del("Location") }},
		{"new name", func(h http.Header) { h.Set("X-Late", "1") }},
		{"del and new name", func(h http.Header) { h.Del("Location"); h.Set("X-Late", "1") }},
		{"emptied", func(h http.Header) { h["X-Two"] = h["X-Two"][:0] }},
	} {
		for _, kept := range []bool{false, true} {
			r := NewRecorder()
			h := r.Header()
			for k, vs := range sent {
				h[k] = append(make([]string, 0, 4), vs...) // room to grow in place
			}
			r.WriteHeader(http.StatusCreated)
			if _, err := r.Write([]byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if kept {
				tc.after(h) // the map kept from before the status
			} else {
				tc.after(r.Header())
			}
			public := r.Outcome()
			out := r.take()
			for what, got := range map[string]*idem.Outcome{"take": out, "Outcome": public} {
				if !reflect.DeepEqual(got.Header, sent) || got.Status != http.StatusCreated || string(got.Body) != `{}` {
					t.Errorf("%s (kept map %v): %s = %d %v %q; want 201 %v {}", tc.name, kept, what, got.Status, got.Header, got.Body, sent)
				}
			}
			if same := reflect.ValueOf(out.Header).UnsafePointer() == reflect.ValueOf(h).UnsafePointer(); same != (tc.name == "untouched") {
				t.Errorf("%s: take handed on the handler's own map: %v", tc.name, same)
			}
			public.Header.Set("Content-Type", "text/plain")
			if r.take().Header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: changing Outcome's header changed the recorder's", tc.name)
			}
		}
	}
}

// TestReplayHeadersKeepsAWholeAnswerAsItIs: an answer whose every header is kept, under its
// canonical name and with a value, is stored with its own header map; one header that is not
// kept, not canonical or empty makes a copy (TestReplayHeadersKeepsCopies).
func TestReplayHeadersKeepsAWholeAnswerAsItIs(t *testing.T) {
	t.Parallel()
	p := &Policy{ReplayHeaders: []string{"X-Trace"}}
	whole := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}, "X-Trace": {"a"}}
	if got := replayHeaders(whole, p); reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(whole).UnsafePointer() {
		t.Errorf("replayHeaders(%v) copied an answer it keeps whole", whole)
	}
	for _, h := range []http.Header{
		{"Content-Type": {"application/json"}, "X-Other": {"v"}},
		{"content-type": {"application/json"}},
		{"Content-Type": {"application/json"}, "Link": {}},
		{"Content-Type": {"application/json"}, "Set-Cookie": {"s=1"}},
	} {
		if got := replayHeaders(h, p); got != nil && reflect.ValueOf(got).UnsafePointer() == reflect.ValueOf(h).UnsafePointer() {
			t.Errorf("replayHeaders(%v) kept it as it is", h)
		}
	}
}

// TestStoredOutcomeOfATooLargeBodyLeavesTheAnswer: the stored outcome of a body too large to
// keep says so in its own header, and the answer written to the client keeps its Content-Type
// and gets no such header, though the two shared one header map before.
func TestStoredOutcomeOfATooLargeBodyLeavesTheAnswer(t *testing.T) {
	t.Parallel()
	cfg := idem.Config{MaxStoredBody: 4, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	live := &idem.Outcome{Status: http.StatusCreated, Body: []byte(`{"id":"long"}`),
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}}}
	stored, err := storedOutcome(cfg, &Policy{Operation: "op"}, live, "op", "k")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Body != nil || stored.Header.Get(HeaderBodyOmitted) != "true" || stored.Header.Get("Content-Type") != "" ||
		stored.Header.Get("Location") != "/v1/payments/1" {
		t.Errorf("stored = %d %v %q; want no body, %s: true, no Content-Type, the Location", stored.Status, stored.Header, stored.Body, HeaderBodyOmitted)
	}
	if want := (http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/payments/1"}}); !reflect.DeepEqual(live.Header, want) {
		t.Errorf("the answer's header = %v after storing; want %v", live.Header, want)
	}
}
