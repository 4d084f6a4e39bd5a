package idemhttp

import (
	"net/http"
	"reflect"
	"testing"
)

// TestCanonicalKeyIsCanonicalHeaderKey: the names canonicalKey recognises without the general
// check are in canonical form, and every other name is canonicalised as net/http does.
func TestCanonicalKeyIsCanonicalHeaderKey(t *testing.T) {
	t.Parallel()
	for _, k := range []string{
		"Content-Type", "Location", "Content-Language", "Etag", "Last-Modified", "Link", "Cache-Control",
		"Retry-After", HeaderReplayed, HeaderBodyOmitted,
		"content-type", "ETag", "LOCATION", "x-request-id", "X-Custom", "Set-Cookie", "bad name", "",
	} {
		if got, want := canonicalKey(k), http.CanonicalHeaderKey(k); got != want {
			t.Errorf("canonicalKey(%q) = %q, want %q", k, got, want)
		}
	}
}

// TestReplayHeadersKeepsCopies: what replayHeaders keeps is allow-listed, under canonical
// names, an empty list as nil, and copied: changing the answer's header afterwards changes
// nothing stored.
func TestReplayHeadersKeepsCopies(t *testing.T) {
	t.Parallel()
	p := &Policy{DeclaredHeaders: []string{"retry-after"}, ReplayHeaders: []string{"X-Trace"}}
	h := http.Header{
		"content-type": {"application/json"},
		"Location":     {"/v1/payments/1"},
		"Retry-After":  {"3"},
		"X-Trace":      {"a", "b"},
		"X-Empty":      {},
		"Link":         {},
		"Set-Cookie":   {"s=1"},
		"X-Other":      {"dropped"},
	}
	got := replayHeaders(h, p)
	want := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/v1/payments/1"},
		"Retry-After":  {"3"},
		"X-Trace":      {"a", "b"},
		"Link":         nil,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayHeaders = %#v, want %#v", got, want)
	}
	h["Location"][0] = "changed"
	h["X-Trace"][1] = "changed"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replayHeaders shares the answer's values: %#v after a change, want %#v", got, want)
	}
	got["Location"] = append(got["Location"], "appended")
	if got["Retry-After"][0] != "3" || got["X-Trace"][0] != "a" {
		t.Fatalf("appending to one kept list changed another: %#v", got)
	}
	if got := replayHeaders(http.Header{"X-Other": {"v"}}, p); got != nil {
		t.Fatalf("replayHeaders with nothing allowed = %#v, want nil", got)
	}
}
