package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"math/rand/v2"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

func canon(t testing.TB, ct, body string, exclude ...string) (string, error) {
	t.Helper()
	b, err := idem.CanonicalBody(ct, []byte(body), exclude...)
	return string(b), err
}

func TestCanonicalJSONBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{"b":1,"a":[true,null,"x"]}`, `{"a":[true,null,"x"],"b":1}`},
		{" {\n\"a\" : 1.0 } \n", `{"a":1}`},
		{`{"a":1e2,"b":-0.5,"c":12345678901234567890123}`, `{"a":100,"b":-0.5,"c":12345678901234567890123}`},
		{`{"undeclared":{"deep":[1,2]}}`, `{"undeclared":{"deep":[1,2]}}`},
		{`"<&>"`, `"\u003c\u0026\u003e"`},
	} {
		got, err := canon(t, "application/json", c.in)
		if err != nil || got != c.want {
			t.Errorf("CanonicalBody(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	got, err := canon(t, "application/merge-patch+json; charset=utf-8", `{"meta":{"ts":1,"id":2},"x":[5,6]}`, "/meta/ts", "/x/0", "/missing/deep")
	if err != nil || got != `{"meta":{"id":2},"x":[null,6]}` {
		t.Errorf("with exclusions: %s, %v", got, err)
	}
	for _, bad := range []string{
		`{"a":1}GARBAGE`, `{"a":1}{"a":1}`, `{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `{"a":`, `[1,]`, `nul`,
		strings.Repeat("[", 600) + strings.Repeat("]", 600),
	} {
		_, err := canon(t, "application/json", bad)
		var be *idem.BodyError
		if !errors.As(err, &be) {
			t.Errorf("CanonicalBody(%.40q) = %v; want a *BodyError", bad, err)
		}
	}
}

func TestCanonicalFormAndBytes(t *testing.T) {
	t.Parallel()
	a, _ := canon(t, "application/x-www-form-urlencoded", "b=2&a=1&a=0")
	b, _ := canon(t, "application/x-www-form-urlencoded", "a=1&a=0&b=2")
	c, _ := canon(t, "application/x-www-form-urlencoded", "a=0&a=1&b=2")
	if a != b || a == c {
		t.Errorf("forms: %q %q %q; want fields sorted by name, a name's values in order", a, b, c)
	}
	if x, _ := canon(t, "application/x-www-form-urlencoded", "a=1&secret=2", "/secret"); x != "a=1" {
		t.Errorf("form exclusion: %q", x)
	}
	if _, err := canon(t, "application/x-www-form-urlencoded", "a=%zz"); err == nil {
		t.Error("a malformed form was accepted")
	}
	if x, _ := canon(t, "text/plain", " a  b "); x != " a  b " {
		t.Errorf("text is not kept byte for byte: %q", x)
	}
}

func multipartOf(t testing.TB, boundary string, parts [][3]string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+p[0]+`"`)
		h.Set("Content-Type", p[1])
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, p[2])
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

func TestCanonicalMultipartIgnoresOnlyTheBoundary(t *testing.T) {
	t.Parallel()
	parts := [][3]string{{"title", "text/plain", "report"}, {"file", "application/pdf", "%PDF-1.7"}}
	ct1, b1 := multipartOf(t, "aaaa", parts)
	ct2, b2 := multipartOf(t, "bbbbbbbb", parts)
	x1, err1 := idem.CanonicalBody(ct1, b1)
	x2, err2 := idem.CanonicalBody(ct2, b2)
	if err1 != nil || err2 != nil || !bytes.Equal(x1, x2) {
		t.Fatalf("same parts, other boundary: %q %v / %q %v", x1, err1, x2, err2)
	}
	for _, other := range [][][3]string{
		{{"title", "text/plain", "report"}, {"file", "application/pdf", "%PDF-1.8"}},
		{{"file", "application/pdf", "%PDF-1.7"}, {"title", "text/plain", "report"}},
		{{"title", "text/html", "report"}, {"file", "application/pdf", "%PDF-1.7"}},
		{{"name", "text/plain", "report"}, {"file", "application/pdf", "%PDF-1.7"}},
	} {
		ct, b := multipartOf(t, "aaaa", other)
		x, err := idem.CanonicalBody(ct, b)
		if err != nil || bytes.Equal(x, x1) {
			t.Errorf("parts %v fingerprint like %v (%v)", other, parts, err)
		}
	}
	if _, err := idem.CanonicalBody("multipart/form-data", b1); err == nil {
		t.Error("a multipart body without a boundary was accepted")
	}
}

// FuzzCanonicalJSONBody: no input panics; what canonicalises once canonicalises to itself, and
// re-spacing a valid body changes nothing.
func FuzzCanonicalJSONBody(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `{"a":1.0}`, `[1e2,-0.0,"\u00e9"]`, `{"a":1}{}`, `{"a":1,"a":2}`, `"x"`, `12345678901234567890e-3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c1, err := idem.CanonicalBody("application/json", raw)
		if err != nil {
			var be *idem.BodyError
			if !errors.As(err, &be) {
				t.Fatalf("error %v is not a *BodyError", err)
			}
			return
		}
		c2, err := idem.CanonicalBody("application/json", c1)
		if err != nil || !bytes.Equal(c1, c2) {
			t.Fatalf("not idempotent: %s -> %s -> %s (%v)", raw, c1, c2, err)
		}
		var spaced bytes.Buffer
		if json.Indent(&spaced, raw, " ", "\t") == nil {
			c3, err := idem.CanonicalBody("application/json", spaced.Bytes())
			if err != nil || !bytes.Equal(c1, c3) {
				t.Fatalf("white space changed the canonical form: %s vs %s (%v)", c1, c3, err)
			}
		}
	})
}

// FuzzCanonicalMultipart: no input panics, and a body that parses fingerprints the same under
// another boundary.
func FuzzCanonicalMultipart(f *testing.F) {
	f.Add("title", "text/plain", "report", "file", "application/pdf", "%PDF")
	f.Add("", "", "", "x", "a/b", "\x00")
	f.Fuzz(func(t *testing.T, n1, t1, c1, n2, t2, c2 string) {
		parts := [][3]string{{n1, t1, c1}, {n2, t2, c2}}
		for _, p := range parts {
			if strings.ContainsAny(p[0]+p[1], "\"\r\n\\") {
				return // not a header value a client could send
			}
		}
		ctA, a := multipartOf(t, "boundary-a", parts)
		ctB, b := multipartOf(t, "another-boundary-b", parts)
		xa, errA := idem.CanonicalBody(ctA, a)
		xb, errB := idem.CanonicalBody(ctB, b)
		if (errA == nil) != (errB == nil) || !bytes.Equal(xa, xb) {
			t.Fatalf("boundary changed the fingerprint: %q %v / %q %v", xa, errA, xb, errB)
		}
		_, _ = idem.CanonicalBody(ctA, append(a[:len(a)/2:len(a)/2], c2...)) // truncated: must not panic
	})
}

// The fast path for scalar parts encodes exactly what the general path does.
func TestFingerprintScalarPartsMatchTheGeneralEncoding(t *testing.T) {
	t.Parallel()
	s := "acme"
	var nilString *string
	for _, v := range []any{"acme", &s, nilString, 42, int64(-7), uint32(9), true, "<&>\u2028", 1.5} {
		fast, err1 := idem.CanonicalScalar(v)
		general, err2 := idem.CanonicalJSON(v)
		if err1 != nil || err2 != nil || !bytes.Equal(fast, general) {
			t.Errorf("%#v: fast path %s (%v), general path %s (%v)", v, fast, err1, general, err2)
		}
	}
}

func TestCanonicalJSONBodyMustBeUTF8(t *testing.T) {
	t.Parallel()
	var be *idem.BodyError
	if _, err := canon(t, "application/json", "{\"x\":\"\xff\"}"); !errors.As(err, &be) {
		t.Fatalf("a JSON body with invalid UTF-8 = %v; want a *BodyError", err)
	}
}

// Numbers are canonicalised by their exact decimal value: equal values share one spelling,
// different values never do, however close (float64 would merge the last pair below).
func TestCanonicalNumbersAreExact(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"-0", "0"}, {"-0.0e5", "0"},
		{"100", "100"}, {"1e2", "100"}, {"1E+2", "100"}, {"-42.00", "-42"},
		{"12.50", "12.5"}, {"0.0001", "0.0001"}, {"1e-4", "0.0001"}, {"0.00001", "1e-05"}, {"123456.7", "123456.7"},
		{"1234567.5", "1.2345675e+06"}, {"1e99", "1" + strings.Repeat("0", 99)}, {"1e100", "1e+100"},
		{strings.Repeat("9", 101), "9." + strings.Repeat("9", 100) + "e+100"},
		{"12345678.123456789", "1.2345678123456789e+07"}, {"12345678.1234567891234", "1.23456781234567891234e+07"},
		{"1234.5678123456789", "1234.5678123456789"}, {"1234.56781234567891234", "1234.56781234567891234"},
		{"1e99999999999999999999", "1e+99999999999999999999"}, {"1.5e-99999999999999999999", "1.5e-99999999999999999999"},
	} {
		got, err := canon(t, "application/json", c.in)
		if err != nil || got != c.want {
			t.Errorf("CanonicalBody(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	// Random decimals near each other, against math/big (FuzzCanonicalNumber searches further).
	r := rand.New(rand.NewPCG(4, 16))
	number := func() string {
		d := []byte(strconv.Itoa(1 + r.IntN(9)))
		for range r.IntN(25) {
			d = append(d, "0123456789"[r.IntN(10)])
		}
		s := string(d)
		if p := r.IntN(len(s) + 1); p < len(s) && p > 0 {
			s = s[:p] + "." + s[p:]
		}
		if r.IntN(2) == 0 {
			s += "e" + strconv.Itoa(r.IntN(60)-30)
		}
		return s
	}
	for range 2000 {
		a := number()
		b := respell(a, r.IntN(4))
		if r.IntN(2) == 0 {
			b = number()
		}
		ra, _ := decimal(a)
		rb, _ := decimal(b)
		ca, cb := canonicalNumber(t, a), canonicalNumber(t, b)
		if (ca == cb) != (ra.Cmp(rb) == 0) {
			t.Fatalf("%s and %s (equal: %v) canonicalise to %s and %s", a, b, ra.Cmp(rb) == 0, ca, cb)
		}
	}
}

// FuzzCanonicalNumber checks the canonical spelling of numbers against math/big, which compares
// decimals exactly: the canonical text has the number's value; two numbers share a text exactly
// when their values are equal; and other spellings of the same value (trailing zeros, the point
// moved into the exponent) give the same text.
func FuzzCanonicalNumber(f *testing.F) {
	for _, p := range [][2]string{
		{"12345678.123456789", "12345678.1234567891234"}, {"1", "1.0"}, {"1e2", "100"}, {"-0", "0"},
		{"0.00001", "1e-5"}, {"1234567.5", "12345675e-1"}, {"1e21", "1000000000000000000000"},
	} {
		f.Add(p[0], p[1], uint8(3))
	}
	f.Fuzz(func(t *testing.T, a, b string, shift uint8) {
		ra, ok := decimal(a)
		if !ok {
			return
		}
		ca := canonicalNumber(t, a)
		if rc, ok := decimal(ca); !ok || rc.Cmp(ra) != 0 {
			t.Fatalf("%s canonicalises to %s, which is another value", a, ca)
		}
		if alt := respell(a, int(shift%8)); canonicalNumber(t, alt) != ca {
			t.Fatalf("%s and %s are one value but canonicalise to %s and %s", a, alt, ca, canonicalNumber(t, alt))
		}
		if rb, ok := decimal(b); ok {
			if cb := canonicalNumber(t, b); (cb == ca) != (rb.Cmp(ra) == 0) {
				t.Fatalf("%s and %s (equal: %v) canonicalise to %s and %s", a, b, rb.Cmp(ra) == 0, ca, cb)
			}
		}
	})
}

// decimal is s's exact value when s is a JSON number with a modest exponent (big.Rat spells out
// 10^exponent).
func decimal(s string) (*big.Rat, bool) {
	var n json.Number
	if json.Unmarshal([]byte(s), &n) != nil || strings.TrimSpace(s) != s || n.String() != s {
		return nil, false
	}
	if _, e, ok := strings.Cut(strings.ToLower(s), "e"); ok {
		if x, err := strconv.Atoi(e); err != nil || x > 400 || x < -400 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// respell writes s as its digits without a point, k zeros added, and the exponent lowered to
// match: the same value in another spelling.
func respell(s string, k int) string {
	mant, e, _ := strings.Cut(strings.ToLower(s), "e")
	x, _ := strconv.Atoi(e)
	sign, mant := "", strings.TrimPrefix(mant, "-")
	if len(mant) < len(s) && s[0] == '-' {
		sign = "-"
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		digits, k = "0", 0
	}
	return sign + digits + strings.Repeat("0", k) + "e" + strconv.Itoa(x-len(frac)-k)
}

func canonicalNumber(t *testing.T, s string) string {
	t.Helper()
	c, err := canon(t, "application/json", s)
	if err != nil {
		t.Fatalf("CanonicalBody(%s): %v", s, err)
	}
	return c
}
