package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"mime"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanAgreesWithTree fails t unless the one-pass canonicaliser gives what the tree gives for
// raw: the same bytes, or, where the tree refuses the body, no answer of its own (the tree's
// error is then the answer). fast says the scan must answer itself (a body it is meant for).
func scanAgreesWithTree(t *testing.T, raw []byte, exclude []string, fast bool) {
	t.Helper()
	if !utf8.Valid(raw) {
		return // canonicalJSONBody refuses it before either runs
	}
	want, wantErr := canonicalJSONTree(raw, exclude)
	got, ok := canonicalJSONScan(raw, exclude)
	switch {
	case wantErr != nil && ok:
		t.Fatalf("%.200q excluding %q: the scan gave %s; the tree refuses it: %v", raw, exclude, got, wantErr)
	case wantErr == nil && ok && !bytes.Equal(got, want):
		t.Fatalf("%.200q excluding %q: the scan gave\n%s\nthe tree\n%s", raw, exclude, got, want)
	case wantErr == nil && !ok && fast:
		t.Fatalf("%.200q excluding %q: the scan left a valid body to the tree", raw, exclude)
	}
	// canonicalJSONBody answers exactly as the tree does, errors included.
	body, err := canonicalJSONBody(raw, exclude)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !bytes.Equal(body, want) {
		t.Fatalf("%.200q excluding %q: canonicalJSONBody = %s, %v; the tree %s, %v", raw, exclude, body, err, want, wantErr)
	}
}

func TestCanonicalJSONScanMatchesTheTree(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body    string
		exclude []string
	}{
		{`{"amount_minor": 19900, "currency": "RUB"}`, nil},
		{`{"b":1,"a":[true,null,"x"]}`, nil},
		{" {\n\"a\" : 1.0 } \n", nil},
		{`{"a":1e2,"b":-0.5,"c":12345678901234567890123,"d":-0,"e":0.0,"f":1E+2,"g":1e-7,"h":123456.7}`, nil},
		{`[0,-0,1,10,1.5e300,-1e-300,` + strings.Repeat("9", 100) + `,` + strings.Repeat("9", 101) + `,12345678.1234567891]`, nil},
		{`{"undeclared":{"deep":[1,2]},"aa":{},"a":[]}`, nil},
		{`"<&>"`, nil}, {`"\u003c\u0026\u003e"`, nil}, {"\"\u2028\u2029\"", nil}, {`"\u2028"`, nil},
		{`"\ud83d\ude00 \ud800 \udc00x \ud800\u0041 é \u00e9 \/ \b\f\n\r\t \u0000 \u001f \u007f"`, nil},
		{"\"\x7f ü 日本\"", nil},
		{`{"é":1,"e":2,"\u00e9x":3,"z":4,"Z":5,"":6}`, nil},
		{`{"a\"b":1,"a":2,"a\\":3}`, nil},
		{`{"b":{"d":1,"c":2},"a":{"y":[{"q":1,"p":2}],"x":3}}`, nil},
		{`true`, nil}, {`false`, nil}, {`null`, nil}, {` 7 `, nil}, {`""`, nil},
		// exclusions
		{`{"meta":{"ts":1,"id":2},"x":[5,6]}`, []string{"/meta/ts", "/x/0", "/missing/deep"}},
		{`{"meta":{"ts":1,"id":2},"x":[5,6]}`, []string{"/meta"}},
		{`{"z":1,"meta":{"ts":1,"id":2},"a":[5,6]}`, []string{"/meta", "/z"}},
		{`{"a":1,"b":2}`, []string{"/a", "/b"}},
		{`{"a":1,"b":2}`, []string{"/a", "/a/b"}},
		{`[[1,2],[3,4]]`, []string{"/1/0", "/0"}},
		{`[[1,2],[3,4]]`, []string{"/0/1", "/00", "/-", "/2", "/1/x"}},
		{`{"k/~":1,"k":2,"~1":3}`, []string{"/k~1~0", "/~01"}},
		{`{"a":{"b":1}}`, []string{""}},
		{`{"a":{"b":1}}`, []string{"/a", ""}},
		{`{"a":[{"b":1,"c":2}]}`, []string{"/a/0/b"}},
		{`{"":{"":1,"x":2}}`, []string{"//"}},
		{`5`, []string{"/a"}},
		// refused: the tree's errors must be the answer
		{`{"a":1}GARBAGE`, nil}, {`{"a":1}{"a":1}`, nil}, {`{"a":1,"a":2}`, nil}, {`{"a":{"b":1,"b":1}}`, nil},
		{`{"a":1,"a":2}`, []string{"/a"}}, {`{"b":1,"a":2,"b":3}`, nil}, {`{"\u0061":1,"a":2}`, nil},
		{`{"a":`, nil}, {`[1,]`, nil}, {`nul`, nil}, {`01`, nil}, {`-`, nil}, {`1.`, nil}, {`1e`, nil}, {`.5`, nil},
		{`+1`, nil}, {`[1 2]`, nil}, {`{"a" 1}`, nil}, {`{a:1}`, nil}, {`{"a":1,}`, nil}, {"\"\t\"", nil},
		{`"\x"`, nil}, {`"\u12"`, nil}, {`"abc`, nil}, {` `, nil}, {"\ufeff{}", nil}, {`truex`, nil}, {`[true false]`, nil},
		{`{"a":1}`, []string{"a"}}, {`{"a":1}`, []string{"", "a"}},
		{strings.Repeat("[", 512) + strings.Repeat("]", 512), nil},
		{strings.Repeat("[", 513) + strings.Repeat("]", 513), nil},
		{strings.Repeat("[", 514) + strings.Repeat("]", 514), nil},
		{strings.Repeat(`{"a":`, 513) + "1" + strings.Repeat("}", 513), nil},
		{strings.Repeat(`{"a":`, 512) + "1" + strings.Repeat("}", 512), nil},
	} {
		scanAgreesWithTree(t, []byte(c.body), c.exclude, false)
	}
}

// The scan answers the bodies clients send itself, and agrees with the tree on every one of
// thousands of random documents, each also re-spaced and with its members shuffled, with and
// without exclusions, and broken in random places.
func TestCanonicalJSONScanRandomDocuments(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(18, 2026))
	for range 3000 {
		var b bytes.Buffer
		paths := randomJSON(rng, &b, 0, "")
		doc := b.Bytes()
		var excl []string
		for range rng.IntN(3) {
			excl = append(excl, paths[rng.IntN(len(paths))])
		}
		if rng.IntN(4) == 0 {
			excl = append(excl, "/nothing/here")
		}
		scanAgreesWithTree(t, doc, nil, !bytes.Contains(doc, []byte(`"dup"`)))
		scanAgreesWithTree(t, doc, excl, false)
		for range 3 { // broken somewhere
			cut := slicesClone(doc)
			i := rng.IntN(len(cut))
			switch rng.IntN(3) {
			case 0:
				cut = cut[:i]
			case 1:
				const breakers = "{}[],:\"\\ 0-eE.tx"
				cut[i] = breakers[rng.IntN(len(breakers))]
			default:
				cut = append(cut[:i:i], cut[i+1:]...)
			}
			scanAgreesWithTree(t, cut, excl, false)
		}
	}
}

func slicesClone(b []byte) []byte { return append([]byte(nil), b...) }

var randomStrings = []string{
	"", "a", "b", "dup", "amount_minor", "currency", "é", "\\u00e9", "e\\u0301", "<tag>&", "\\u003c", "\u2028", "\\u2029",
	"\\ud83d\\ude00", "\\ud800", "\\udc00", "\\\"q\\\"", "\\\\", "\\/", "\\b\\f\\n\\r\\t", "\\u0000", "\x7f", "日本", "k/~", "~0", "~1",
	"0", "1", "-", "A", "Z", "😀",
}

var randomNumbers = []string{
	"0", "-0", "1", "-1", "42", "1.0", "1.50", "10e-1", "1e2", "1E+2", "-2.5e-3", "0.0001", "0.00001", "123456.7", "1234567.1",
	"12345678.1234567891", "1e999999", "-1e-999999", "0e10", "100000", "1e5", "1e6", strings.Repeat("7", 101), strings.Repeat("3", 100),
	"9007199254740993", "0.1", "5e-324",
}

// randomJSON writes a random document with random white space and returns the JSON pointers of
// its values.
func randomJSON(rng *rand.Rand, b *bytes.Buffer, depth int, at string) []string {
	ws := func() {
		for range rng.IntN(3) {
			b.WriteByte(" \t\n\r"[rng.IntN(4)])
		}
	}
	paths := []string{at}
	ws()
	kind := rng.IntN(8)
	if depth > 4 {
		kind = 2 + rng.IntN(6)
	}
	switch kind {
	case 0, 1:
		b.WriteByte('{')
		n := rng.IntN(5)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			k := randomStrings[rng.IntN(len(randomStrings))]
			if k == "dup" && rng.IntN(2) == 0 {
				k = strconv.Itoa(i)
			}
			b.WriteString(`"` + k + `"`)
			ws()
			b.WriteByte(':')
			var key string
			_ = json.Unmarshal([]byte(`"`+k+`"`), &key)
			paths = append(paths, randomJSON(rng, b, depth+1, at+"/"+strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1"))...)
		}
		ws()
		b.WriteByte('}')
	case 2:
		b.WriteByte('[')
		n := rng.IntN(4)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			paths = append(paths, randomJSON(rng, b, depth+1, at+"/"+strconv.Itoa(i))...)
		}
		ws()
		b.WriteByte(']')
	case 3, 4:
		b.WriteString(`"` + randomStrings[rng.IntN(len(randomStrings))] + randomStrings[rng.IntN(len(randomStrings))] + `"`)
	case 5, 6:
		b.WriteString(randomNumbers[rng.IntN(len(randomNumbers))])
	default:
		b.WriteString([]string{"true", "false", "null"}[rng.IntN(3)])
	}
	ws()
	return paths
}

// FuzzCanonicalJSONScan: for every body and exclusion, the scan agrees with the tree. Its seeds
// include every stored input of the other JSON fuzz targets.
func FuzzCanonicalJSONScan(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x"]}`, `{"a":1.0}`, `[1e2,-0.0,"\u00e9"]`, `{"a":1}{}`, `{"a":1,"a":2}`, `"x"`,
		`12345678901234567890e-3`, `{"z":{"y":{"x":true}},"a":"\u00e9"}`, `{"k/~":1}`, `"<\u2028>"`, `{"a":[{"c":1,"b":2}]}`} {
		f.Add([]byte(s), "/a")
	}
	for _, dir := range []string{"FuzzFingerprint", "FuzzCanonicalJSONBody", "FuzzCanonicalJSONScan"} {
		files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", dir, "*"))
		for _, file := range files {
			if vals := fuzzCorpusStrings(f, file); len(vals) > 0 {
				excl := "/a"
				if len(vals) > 1 {
					excl = vals[1]
				}
				f.Add([]byte(vals[0]), excl)
			}
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, exclude string) {
		scanAgreesWithTree(t, raw, nil, false)
		scanAgreesWithTree(t, raw, []string{exclude}, false)
	})
}

// fuzzCorpusStrings reads the values of a stored fuzz input (go test fuzz v1), strings and
// []bytes alike.
func fuzzCorpusStrings(f *testing.F, file string) []string {
	data, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	var vals []string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		for _, prefix := range []string{"string(", "[]byte("} {
			if lit, ok := strings.CutPrefix(line, prefix); ok {
				if v, err := strconv.Unquote(strings.TrimSuffix(lit, ")")); err == nil {
					vals = append(vals, v)
				}
			}
		}
	}
	return vals
}

// BenchmarkCanonicalJSON: the one-pass canonicaliser against the tree, on the payments
// example's body and on a larger one with nesting, unsorted members and an exclusion.
func BenchmarkCanonicalJSON(b *testing.B) {
	bodies := map[string]struct {
		raw     string
		exclude []string
	}{
		"payment": {`{"amount_minor": 19900, "currency": "RUB"}`, nil},
		"order": {`{"customer":{"name":"Ann","email":"ann@example.com"},"lines":[{"sku":"A-1","qty":2,"price":"19.90"},` +
			`{"sku":"B-7","qty":1,"price":"5.00"}],"meta":{"request_id":"r-1","ts":1733100000},"note":"leave at the door"}`, []string{"/meta/ts"}},
	}
	for name, body := range bodies {
		for impl, canon := range map[string]func([]byte, []string) ([]byte, error){"tree": canonicalJSONTree, "scan": canonicalJSONBody} {
			b.Run(name+"/"+impl, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := canon([]byte(body.raw), body.exclude); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// mediaType's shortcut for a bare type/subtype gives what mime.ParseMediaType gives, for the
// Content-Types clients send and for near misses of the shortcut.
func TestMediaTypeMatchesTheParser(t *testing.T) {
	cases := []string{
		"", "application/json", "Application/JSON", "application/json; charset=utf-8",
		"application/json;charset=utf-8", " application/json", "application/json ", "application/problem+json",
		"application/vnd.api+json", "text/plain", "multipart/form-data; boundary=x", "application/x-www-form-urlencoded",
		"application/", "/json", "application", "application//json", "a/b/c", "*/*", "image/*",
		"application/json; charset", "application/json;", "application/jso\u00f1", "app lication/json",
		"application/json\t", "x/y", "a-b.c+d/e_f~g", "a/b;c=d;c=e",
	}
	for _, ct := range cases {
		mt, params, err := mediaType(ct)
		wantMT, wantParams, wantErr := mime.ParseMediaType(ct)
		if mt != wantMT || (err == nil) != (wantErr == nil) || len(params) != len(wantParams) {
			t.Errorf("mediaType(%q) = %q, %v, %v; mime.ParseMediaType gives %q, %v, %v", ct, mt, params, err, wantMT, wantParams, wantErr)
		}
		for k, v := range wantParams {
			if params[k] != v {
				t.Errorf("mediaType(%q): parameter %s = %q; want %q", ct, k, params[k], v)
			}
		}
	}
}
