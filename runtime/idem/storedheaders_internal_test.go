package idem

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"
)

// decodeStoredHeaders agrees with json.Unmarshal, which decoded every stored outcome's headers
// before it: the same header, or the same refusal.
func storedHeadersAgree(t *testing.T, raw []byte) {
	t.Helper()
	var want http.Header
	wantErr := json.Unmarshal(raw, &want)
	got, err := decodeStoredHeaders(raw)
	if (err == nil) != (wantErr == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%q: decoded %#v, %v; json.Unmarshal %#v, %v", raw, got, err, want, wantErr)
	}
}

func TestDecodeStoredHeadersMatchesUnmarshal(t *testing.T) {
	t.Parallel()
	written := []http.Header{
		{"Content-Type": {"application/json"}, "Location": {"/v1/payments/pay_1"}},
		{"Set-Cookie": {"a=1", "b=2"}, "X-Empty": {}, "X-Blank": {""}},
		{"X-Quoted": {`say "hi" \ <&> é` + "\u2028\x01"}},
		{},
	}
	for _, h := range written {
		raw, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		storedHeadersAgree(t, raw)
		if _, ok := scanStoredHeaders(raw); !ok && len(h) > 0 && h.Get("X-Quoted") == "" {
			t.Errorf("%s: the form completion writes was left to json.Unmarshal", raw)
		}
	}
	jsonb := []byte(`{"Location": ["/v1/payments/pay_1"], "Content-Type": ["application/json"]}`)
	if _, ok := scanStoredHeaders(jsonb); !ok {
		t.Errorf("%s: the form PostgreSQL returns was left to json.Unmarshal", jsonb)
	}
	for _, raw := range []string{
		`null`, `{"A":null}`, `{"A":["x"],"A":["y"]}`, ` {"A":["x"]}`, `{"A" : ["x"]}`, `{"A":["x",]}`, `{"A":["x"]`, `{"A":["x"]}x`,
		`{"Location": ["/v1/p"], "Content-Type": ["application/json"]}`, " { \"A\" : [ \"x\" , \"y\" ] , \"B\":[ ] } ", `{"A": ["x"] `, `{"A":[1]}`, `{"A":"x"}`, `{"A":[`, `{"A":`, `{"A"`, `{`, `{}`, `{}}`, `{"A":[]}`, `{"A":[],}`, "{\"A\":[\"\xff\"]}",
		"{\"A\":[\"\t\"]}", `{"\u0041":["\n"]}`, `[]`, `{"A":["x"],"B":["y","z"]}`, `{"":[""]}`, `{"A":[""`, `{"A":["x"]]`,
	} {
		storedHeadersAgree(t, []byte(raw))
	}
}

func FuzzDecodeStoredHeaders(f *testing.F) {
	f.Add([]byte(`{"Content-Type":["application/json"],"Location":["/v1/payments/pay_1"]}`))
	f.Add([]byte(`{"A":[],"B":["x","y"]}`))
	f.Add([]byte(`{"Location": ["/v1/payments/pay_1"], "Content-Type": ["application/json"]}`))
	f.Fuzz(func(t *testing.T, raw []byte) { storedHeadersAgree(t, raw) })
}

func BenchmarkDecodeStoredHeaders(b *testing.B) {
	raw := []byte(`{"Location": ["/v1/payments/pay_1"], "Content-Type": ["application/json"]}`) // as jsonb prints it
	for name, decode := range map[string]func([]byte) (http.Header, error){
		"unmarshal": func(raw []byte) (h http.Header, err error) { return h, json.Unmarshal(raw, &h) },
		"scan":      decodeStoredHeaders,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decode(raw); err != nil {
					b.Fatal(fmt.Sprint(err))
				}
			}
		})
	}
}

// encodeStoredHeaders writes what json.Marshal writes, for plain headers on its own and for
// anything that needs escaping through json.Marshal itself.
func TestEncodeStoredHeadersIsJSONMarshal(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{},
		{"Location": {"/v1/payments/pay_1"}},
		{"Location": {"/v1/payments/pay_1"}, "Content-Type": {"application/json"}, "X-B": {"1", "2"}, "X-A": {}},
		{"X-Nil": nil, "A": {""}},
		{"X-Quote": {`say "hi"`}},
		{"X-Backslash": {`a\b`}},
		{"X-Html": {"<a href='x'>&</a>"}},
		{"X-Control": {"a\tb\x01"}},
		{"X-Utf8": {"café", "\u2028"}},
		{"X-Bad": {"\xff\xfe"}},
		{"Quote\"Name": {"v"}},
	} {
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeStoredHeaders(h)
		if err != nil || string(got) != string(want) {
			t.Errorf("encodeStoredHeaders(%#v) = %s, %v; want %s", h, got, err, want)
		}
	}
}
