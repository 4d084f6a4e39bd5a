package idemhttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func TestProblemWriteTo(t *testing.T) {
	t.Parallel()
	_, p := idemhttp.ParseKey(nil, idemhttp.KeyRule{Header: "Idempotency-Key", Required: true})
	p.RetryAfter = 1500 * time.Millisecond
	w := httptest.NewRecorder()
	if err := p.WriteTo(w); err != nil {
		t.Fatal(err)
	}
	if w.Code != 400 || w.Header().Get("Content-Type") != "application/problem+json" ||
		w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("problem answer %d %v", w.Code, w.Header())
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["type"] != "urn:idemgen:problem:key-missing" || got["code"] != "key-missing" || got["status"] != 400.0 ||
		got["title"] == "" || !strings.Contains(got["detail"].(string), "Idempotency-Key") {
		t.Fatalf("problem body %v", got)
	}
}

func TestStatuses(t *testing.T) {
	t.Parallel()
	s := idem.Statuses("2xx", "404", "4xx")
	for status, want := range map[int]bool{200: true, 299: true, 404: true, 409: true, 300: false, 500: false,
		408: false, 425: false, 429: false, 99: false, 600: false} {
		if s.Contains(status) != want {
			t.Errorf("Contains(%d) = %v; want %v", status, !want, want)
		}
	}
	if !idem.Statuses().IsEmpty() || idem.Statuses("201").IsEmpty() {
		t.Error("IsEmpty is wrong")
	}
	for _, bad := range []string{"6xx", "2XX", "20", "abc", "1000", "099"} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), bad) {
					t.Errorf("Statuses(%q) did not panic with the item named: %v", bad, r)
				}
			}()
			idem.Statuses(bad)
		}()
	}
}

func TestScopeStringIsUnambiguous(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tenant string
		parts  []idemhttp.ScopePart
	}{
		{"a", []idemhttp.ScopePart{{"operation", "b"}}},
		{"a|9:operation=1:b", nil},
		{"", []idemhttp.ScopePart{{"operation", "a"}, {"header:X", "b"}}},
		{"", []idemhttp.ScopePart{{"operation", "a|6:header"}}},
		{"", []idemhttp.ScopePart{{"operation=", "a"}}},
		{"", nil},
		{"\x00", nil},
		{"x2:00", nil},
		{"00", nil},
		{"\xff", []idemhttp.ScopePart{{"path:id", "\xfe"}}},
	}
	seen := map[string]int{}
	for i, c := range cases {
		s := idemhttp.ScopeString(c.tenant, c.parts)
		if j, dup := seen[s]; dup {
			t.Errorf("cases %d and %d both render %q", j, i, s)
		}
		seen[s] = i
	}
	if got := idemhttp.ScopeString("acme", []idemhttp.ScopePart{{"operation", "createPayment"}}); got != "4:acme|9:operation=13:createPayment" {
		t.Errorf("ScopeString = %q", got)
	}
}

func TestRecorderAndReplayWriter(t *testing.T) {
	t.Parallel()
	r := idemhttp.NewRecorder()
	r.Write([]byte("a"))
	r.WriteHeader(500) // too late: net/http keeps the first status
	r.Write([]byte("b"))
	if o := r.Outcome(); o.Status != 200 || string(o.Body) != "ab" {
		t.Fatalf("Outcome = %+v", o)
	}
	if o := idemhttp.NewRecorder().Outcome(); o.Status != 200 || len(o.Body) != 0 {
		t.Fatalf("empty Outcome = %+v", o)
	}
	late := idemhttp.NewRecorder()
	late.Header().Set("Content-Type", "text/plain")
	late.WriteHeader(201)
	late.Header().Set("X-Too-Late", "1") // net/http would not send it
	http.NewResponseController(late).Flush()
	if o := late.Outcome(); o.Header.Get("X-Too-Late") != "" || o.Header.Get("Content-Type") != "text/plain" || o.Status != 201 {
		t.Fatalf("Outcome = %+v; want the header as it was at WriteHeader", o)
	}

	w := httptest.NewRecorder()
	rw := idemhttp.ReplayWriter(w)
	rw.Header().Del(idemhttp.HeaderReplayed) // a Visit method that resets headers still gets it
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusCreated)
	rw.Write([]byte("{}"))
	if w.Code != 201 || w.Header().Get(idemhttp.HeaderReplayed) != "true" || w.Body.String() != "{}" {
		t.Fatalf("ReplayWriter answer %d %v %q", w.Code, w.Header(), w.Body)
	}
	if u, ok := rw.(interface{ Unwrap() http.ResponseWriter }); !ok || u.Unwrap() != w {
		t.Fatal("ReplayWriter does not unwrap to the original writer")
	}
}

func FuzzScopeString(f *testing.F) {
	f.Add("acme", "operation", "createPayment", "acme|9:operation", "=13", ":createPayment")
	f.Add("\x00", "path:id", "\xff", "x2:00", "", "")
	f.Fuzz(func(t *testing.T, t1, n1, v1, t2, n2, v2 string) {
		a := idemhttp.ScopeString(t1, []idemhttp.ScopePart{{n1, v1}})
		b := idemhttp.ScopeString(t2, []idemhttp.ScopePart{{n2, v2}})
		if a == b && (t1 != t2 || n1 != n2 || v1 != v2) {
			t.Fatalf("different scopes render alike: %q", a)
		}
		if c := idemhttp.ScopeString(t1+n1, nil); c == a && n1+v1 != "" {
			t.Fatalf("a part and a longer tenant render alike: %q", a)
		}
	})
}
