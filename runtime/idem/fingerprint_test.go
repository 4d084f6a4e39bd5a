package idem_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

type payment struct {
	Amount   int               `json:"amount"`
	Currency string            `json:"currency"`
	Meta     map[string]string `json:"meta,omitempty"`
	Items    []item            `json:"items,omitempty"`
}

type item struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

func fp(t testing.TB, route string, body any, exclude ...string) string {
	t.Helper()
	f := idem.NewFingerprinter(route)
	if err := f.Body(body, exclude...); err != nil {
		t.Fatal(err)
	}
	return f.Sum()
}

func TestFingerprintCanonical(t *testing.T) {
	t.Parallel()
	typed := payment{Amount: 100, Currency: "EUR", Meta: map[string]string{"b": "2", "a": "1"}}
	raw1 := json.RawMessage(`{"currency":"EUR","amount":100,"meta":{"a":"1","b":"2"}}`)
	raw2 := json.RawMessage("{\n  \"meta\": {\"b\": \"2\", \"a\": \"1\"},\n  \"amount\": 100, \"currency\": \"EUR\"\n}")
	base := fp(t, "POST /v1/payments", typed)
	if got := fp(t, "POST /v1/payments", raw1); got != base {
		t.Errorf("key order changed the fingerprint")
	}
	if got := fp(t, "POST /v1/payments", raw2); got != base {
		t.Errorf("whitespace changed the fingerprint")
	}
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Errorf("Sum = %q; want 64 hex digits", base)
	}

	differ := map[string]string{
		"route":  fp(t, "POST /v1/refunds", typed),
		"amount": fp(t, "POST /v1/payments", payment{Amount: 101, Currency: "EUR", Meta: typed.Meta}),
		"meta":   fp(t, "POST /v1/payments", payment{Amount: 100, Currency: "EUR"}),
	}
	for what, got := range differ {
		if got == base {
			t.Errorf("a different %s gave the same fingerprint", what)
		}
	}

	// Excluding a volatile field makes requests that differ only there equal.
	a := payment{Amount: 1, Currency: "EUR", Meta: map[string]string{"requestId": "r1", "note": "x"}}
	b := payment{Amount: 1, Currency: "EUR", Meta: map[string]string{"requestId": "r2", "note": "x"}}
	if fp(t, "R", a) == fp(t, "R", b) {
		t.Fatal("requests differing in meta.requestId fingerprint alike without an exclusion")
	}
	if fp(t, "R", a, "/meta/requestId") != fp(t, "R", b, "/meta/requestId") {
		t.Error("exclude /meta/requestId did not remove the field")
	}
	if fp(t, "R", a, "/meta/requestId") == fp(t, "R", payment{Amount: 1, Currency: "EUR", Meta: map[string]string{"note": "y"}}, "/meta/requestId") {
		t.Error("exclusion removed more than the named field")
	}
	// RFC 6901 escapes and array elements.
	weird := json.RawMessage(`{"a/b":1,"m~n":2,"list":[{"x":1},{"x":2}]}`)
	got, err := idem.CanonicalJSON(weird, "/a~1b", "/m~0n", "/list/0/x", "/nothing/here", "/list/7")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"list":[{},{"x":2}]}` {
		t.Errorf("CanonicalJSON with escaped pointers = %s", got)
	}
	if _, err := idem.CanonicalJSON(weird, "a"); err == nil || !strings.Contains(err.Error(), "JSON pointer") {
		t.Errorf("a pointer without a leading / gave %v; want an error naming JSON pointers", err)
	}
	// Form bodies fingerprint through the same canonical form.
	f1 := url.Values{"b": {"2"}, "a": {"1"}}
	f2 := url.Values{"a": {"1"}, "b": {"2"}}
	if fp(t, "R", f1) != fp(t, "R", f2) {
		t.Error("form values in a different order fingerprint differently")
	}
}

func TestFingerprintFraming(t *testing.T) {
	t.Parallel()
	sum := func(parts ...[2]string) string {
		f := idem.NewFingerprinter("GET /x")
		for _, p := range parts {
			if err := f.Add(p[0], p[1]); err != nil {
				t.Fatal(err)
			}
		}
		return f.Sum()
	}
	// Moving text between name and value, or between parts, must change the fingerprint.
	seen := map[string]string{}
	for name, parts := range map[string][][2]string{
		"one part":      {{"query:a", "bc"}},
		"shifted":       {{"query:ab", "c"}},
		"two parts":     {{"query:a", "b"}, {"query:c", ""}},
		"swapped order": {{"query:c", ""}, {"query:a", "b"}},
		"none":          {},
	} {
		s := sum(parts...)
		if other, dup := seen[s]; dup {
			t.Errorf("%s and %s fingerprint alike", name, other)
		}
		seen[s] = name
	}
	f := idem.NewFingerprinter("GET /x")
	if err := f.Add("query:bad", func() {}); err == nil || f.Err() == nil {
		t.Error("Add of an unencodable value did not fail")
	}
	// A part named "body" is not the body.
	g := idem.NewFingerprinter("R")
	_ = g.Add("body", 1)
	if g.Sum() == fp(t, "R", 1) {
		t.Error("a part named body fingerprints like the body")
	}
}

// encodeShuffled writes v (decoded JSON) with object keys in reverse order and extra blanks.
func encodeShuffled(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Sort(sort.Reverse(sort.StringSlice(keys)))
		b.WriteString("{ ")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" ,\n")
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteString(" : ")
			encodeShuffled(b, v[k])
		}
		b.WriteString(" }")
	case []any:
		b.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				b.WriteString(" , ")
			}
			encodeShuffled(b, e)
		}
		b.WriteString(" ]")
	default:
		eb, _ := json.Marshal(v)
		b.Write(eb)
	}
}

func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2,{"c":null}]}`, `[]`, `"x"`, `1.50`, `{"z":{"y":{"x":true}},"a":"\u00e9"}`, `{"a":1,"a":2}`, `{"k/~":1}`, `null`} {
		f.Add(s, "/a")
	}
	f.Fuzz(func(t *testing.T, doc, exclude string) {
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		var v any
		if !json.Valid([]byte(doc)) || dec.Decode(&v) != nil {
			return // only valid JSON documents are request bodies
		}
		var shuffled bytes.Buffer
		encodeShuffled(&shuffled, v)
		var excl []string
		if strings.HasPrefix(exclude, "/") {
			excl = []string{exclude}
		}
		sum := func(body any) string {
			f := idem.NewFingerprinter("POST /fuzz")
			if err := f.Body(body, excl...); err != nil {
				t.Fatalf("Body(%s): %v", doc, err)
			}
			return f.Sum()
		}
		a := sum(json.RawMessage(doc))
		if b := sum(json.RawMessage(doc)); a != b {
			t.Fatalf("not deterministic for %s", doc)
		}
		if b := sum(json.RawMessage(shuffled.Bytes())); a != b {
			t.Fatalf("key order or whitespace changed the fingerprint:\n%s\n%s", doc, shuffled.Bytes())
		}
		if b := sum(v); a != b {
			t.Fatalf("decoded value and raw document fingerprint differently: %s", doc)
		}
		c, err := idem.CanonicalJSON(json.RawMessage(doc), excl...)
		if err != nil {
			t.Fatal(err)
		}
		if c2, _ := idem.CanonicalJSON(json.RawMessage(c)); !bytes.Equal(c, c2) {
			t.Fatalf("canonical form is not a fixed point: %s -> %s", c, c2)
		}
		if len(excl) == 1 && exclude != "/" {
			// Excluding a top-level member equals deleting it first.
			if m, ok := v.(map[string]any); ok && !strings.Contains(exclude[1:], "/") && !strings.Contains(exclude, "~") {
				delete(m, exclude[1:])
				excl = nil
				if b := sum(m); a != b {
					t.Fatalf("excluding %s differs from deleting it: %s", exclude, doc)
				}
			}
		}
	})
}

// TestFingerprintIsSHA256OfTheFrames: a fingerprint is the SHA-256 of its frames (kind, the
// name's length and the name, the value's length and the value; lengths as uvarints), whether
// the Fingerprinter buffers them (a request of a few hundred bytes) or streams them (a body of
// kilobytes, on either side of the point where it switches, and one that crosses it), and Sum
// may be called again, after more parts too.
func TestFingerprintIsSHA256OfTheFrames(t *testing.T) {
	t.Parallel()
	frame := func(b []byte, kind byte, name string, value []byte) []byte {
		b = append(b, kind)
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(value)))
		return append(b, value...)
	}
	for _, size := range []int{0, 1, 40, 200, 300, 4000, 4096, 4200, 100000} {
		body := bytes.Repeat([]byte("abcdefghij"), size/10+1)[:size]
		route := "POST /v1/" + strings.Repeat("r", size%300)
		f := idem.NewFingerprinter(route)
		if err := f.Add("header:X-Tenant-Id", "acme"); err != nil {
			t.Fatal(err)
		}
		if err := f.RawBody("text/plain", body); err != nil {
			t.Fatal(err)
		}
		frames := frame(nil, 'v', "idemgen-fingerprint-1", nil)
		frames = frame(frames, 'r', route, nil)
		frames = frame(frames, 'p', "header:X-Tenant-Id", []byte(`"acme"`))
		if size > 0 {
			frames = frame(frames, 'b', "text/plain", body)
		} else {
			frames = frame(frames, 'b', "text/plain", nil)
		}
		sum := sha256.Sum256(frames)
		if got, want := f.Sum(), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("body of %d bytes: fingerprint %s, want the SHA-256 of the frames %s", size, got, want)
		}
		if again := f.Sum(); again != f.Sum() {
			t.Errorf("body of %d bytes: Sum changed when called again", size)
		}
		big := bytes.Repeat([]byte("z"), 3000)
		if err := f.Add("query:more", string(big)); err != nil {
			t.Fatal(err)
		}
		quoted, _ := json.Marshal(string(big))
		sum = sha256.Sum256(frame(frames, 'p', "query:more", quoted))
		if got, want := f.Sum(), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("body of %d bytes, then a part past the buffer: fingerprint %s, want %s", size, got, want)
		}
	}
}

// TestFingerprintPartIsItsJSON: a part's value is framed as encoding/json writes it, for the
// strings framed without it (plain ASCII) and for those it escapes, through a pointer or not.
func TestFingerprintPartIsItsJSON(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	for _, v := range []any{
		"acme", "", "with space", "a/b?c=d", "quote\"", `back\slash`, "<html>", "a&b", "tab\t", "café", "\u2028",
		"\xff", str("acme"), str("<"), (*string)(nil), 42, int64(-7), true, 3.5,
	} {
		f := idem.NewFingerprinter("GET /x")
		if err := f.Add("query:v", v); err != nil {
			t.Fatal(err)
		}
		var frames []byte
		for _, fr := range []struct {
			kind        byte
			name, value string
		}{{'v', "idemgen-fingerprint-1", ""}, {'r', "GET /x", ""}, {'p', "query:v", string(mustJSON(t, v))}} {
			frames = append(frames, fr.kind)
			frames = binary.AppendUvarint(frames, uint64(len(fr.name)))
			frames = append(frames, fr.name...)
			frames = binary.AppendUvarint(frames, uint64(len(fr.value)))
			frames = append(frames, fr.value...)
		}
		sum := sha256.Sum256(frames)
		if got, want := f.Sum(), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Add(%#v) fingerprints unlike its JSON %s", v, mustJSON(t, v))
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
