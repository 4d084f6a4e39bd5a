package idemwire_test

import (
	"go/build"
	"net/http"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemwire"
)

// TestStandardLibraryOnly: the package clients share with the server imports nothing but the
// standard library, so depending on it brings no module with it.
func TestStandardLibraryOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("idemwire imports %s, which is not in the standard library", imp)
		}
	}
}

func TestProblemTable(t *testing.T) {
	seen := map[string]bool{}
	for _, code := range idemwire.ProblemCodes() {
		if seen[code] {
			t.Errorf("%s is in the table twice", code)
		}
		seen[code] = true
		if idemwire.ProblemTitle(code) == "" || idemwire.ProblemStatus(code) < 0 {
			t.Errorf("%s has no title or status", code)
		}
		if _, ok := idemwire.ProblemRetry(code); !ok {
			t.Errorf("%s: no retry", code)
		}
	}
	if idemwire.ProblemType(idemwire.CodeKeyReused) != "urn:idemgen:problem:key-reused" {
		t.Errorf("type URI %q", idemwire.ProblemType(idemwire.CodeKeyReused))
	}
	if idemwire.ProblemStatus("nope") != -1 || idemwire.ProblemTitle("nope") != "" {
		t.Error("an unknown code has a status or a title")
	}
	if _, ok := idemwire.ProblemRetry("nope"); ok {
		t.Error("an unknown code has a retry")
	}
}

func TestStatusSet(t *testing.T) {
	s, err := idemwire.ParseStatuses(idemwire.DefaultPersist...)
	if err != nil {
		t.Fatal(err)
	}
	for status, want := range map[int]bool{200: true, 302: true, 404: true, 408: false, 425: false, 429: false, 500: false, 99: false, 600: false} {
		if s.Contains(status) != want {
			t.Errorf("default persist contains %d: %v, want %v", status, !want, want)
		}
	}
	s, err = idemwire.ParseStatuses("503", "2XX", "6xx")
	if err == nil || !strings.Contains(err.Error(), `"2XX"`) || !s.Contains(503) || s.Contains(200) {
		t.Errorf("ParseStatuses(503, 2XX, 6xx) = %v, %v: want 503 only and an error naming 2XX", s, err)
	}
	if !(idemwire.StatusSet{}).IsEmpty() || s.IsEmpty() {
		t.Error("IsEmpty")
	}
}

func TestClassifyMediaType(t *testing.T) {
	for ct, want := range map[string]idemwire.MediaClass{
		"application/json":                  idemwire.MediaJSON,
		"Application/JSON; charset=utf-8":   idemwire.MediaJSON,
		"application/merge-patch+json":      idemwire.MediaJSON,
		"application/x-www-form-urlencoded": idemwire.MediaForm,
		"multipart/form-data; boundary=x":   idemwire.MediaMultipart,
		"text/plain":                        idemwire.MediaBytes,
		"application/octet-stream":          idemwire.MediaBytes,
		"":                                  idemwire.MediaNone,
		"not a type":                        idemwire.MediaNone,
	} {
		if got := idemwire.ClassifyMediaType(ct); got != want {
			t.Errorf("ClassifyMediaType(%q) = %v, want %v", ct, got, want)
		}
	}
}

// TestRefusalCode: only the table's codes are read from the refusal header; anything else is
// no code at all, so a client judges such an answer by its status.
func TestRefusalCode(t *testing.T) {
	for v, want := range map[string]string{
		"in-progress":          idemwire.CodeInProgress,
		" operation-uncertain": idemwire.CodeOperationUncertain,
		"out-of-stock":         "",
		"IN-PROGRESS":          "",
		"":                     "",
	} {
		h := http.Header{}
		if v != "" {
			h.Set(idemwire.HeaderRefusal, v)
		}
		if got := idemwire.RefusalCode(h); got != want {
			t.Errorf("RefusalCode(%s: %q) = %q, want %q", idemwire.HeaderRefusal, v, got, want)
		}
	}
}
