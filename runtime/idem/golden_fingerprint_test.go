package idem_test

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Fingerprints are stored with every key: a change to any of these values would answer the keys
// already stored key-reused when they are retried. The values were computed by the tree
// canonicaliser that fingerprinted every stored key before the one-pass one; both must give them.
var goldenFingerprints = []struct {
	ct, body string
	exclude  []string
	want     string
}{
	{"application/json", `{"amount_minor": 19900, "currency": "RUB"}`, nil, "d56cf9c6a9941eff80706d4311606922f9b0b811f6a58b788198e98dcc8ff360"},
	{"application/json", `{"currency":"RUB","amount_minor":19900}`, nil, "d56cf9c6a9941eff80706d4311606922f9b0b811f6a58b788198e98dcc8ff360"},
	{"application/json; charset=utf-8", `{"b":1,"a":[true,null,"x",{"d":1,"c":[]}]}`, nil, "da1ae5faa8598cb0d5d30d33ff7659b6d4c1047433980d56ff2502b38dc72e50"},
	{"application/json", `{"a":1e2,"b":-0.5,"c":12345678901234567890123,"d":-0,"e":1.50,"f":1e-7,"g":123456.7,"h":1e999}`, nil, "4a0250e5c5dede5aa3a42590319a04cc490a7f91bd8479a0bd6d30228d5b428f"},
	{"application/json", `"<&> \u2028 \ud83d\ude00 é \u00e9 \ud800 \b\f\n\r\t\u0001 \/"`, nil, "08fe39aa10544c85d7caf47d1faf9e33eb30dc8c98d9dc9ab34bb75bbcdc56f2"},
	{"application/json", `{"é":1,"e":2,"\u00e9x":3,"Z":4,"":5,"k/~":6}`, nil, "2bc2fd4a50d38ebac4cc3c4e51ef0f7fb6cce0c98c32a0ea13d92b487d9fcb5a"},
	{"application/merge-patch+json", `{"meta":{"ts":1,"id":2},"x":[5,6],"k/~":7}`, []string{"/meta/ts", "/x/0", "/missing/deep", "/k~1~0"}, "c7f63c4c9091ac30f55a2a1b45cbd9360167c2a593366c4a37d1792c0834aa11"},
	{"application/json", `{"a":{"b":1}}`, []string{""}, "50687aa29b294f2d749cd9b9d0547a50fe38abb096249f3871168256ebc8f4ca"},
	{"application/json", `[[1,2],[3,4]]`, []string{"/1"}, "f00c0504abbb19efd52a06ebc6d3b243ae840e6b87fd0da3b7e9b1d0601760cf"},
	{"application/json", `{"n":` + strings.Repeat("9", 101) + `,"m":0.000001}`, nil, "4242f20d3c091bf579b97ee0c84ffbf399759b121454b9c6c3a6ffa97bd068f5"},
	{"application/x-www-form-urlencoded", "b=2&a=1&a=0&secret=x", []string{"/secret"}, "6764d69212a1d95f9c3b530681b1a6b73db27a9cd428d7cc6d0e2e58e2635a15"},
	{"text/plain", " a  b ", nil, "c27f3a642738a14cf9ba140e08f42c77615dfffb32bd0336fd1699c8ef218d93"},
}

func TestFingerprintsOfStoredKeysNeverChange(t *testing.T) {
	t.Parallel()
	for _, g := range goldenFingerprints {
		f := idem.NewFingerprinter("POST /v1/payments")
		if err := f.Add("header:X-Tenant-ID", "acme"); err != nil {
			t.Fatal(err)
		}
		if err := f.RawBody(g.ct, []byte(g.body), g.exclude...); err != nil {
			t.Fatalf("%s %s: %v", g.ct, g.body, err)
		}
		if got := f.Sum(); got != g.want {
			t.Errorf("%s %s excluding %q: fingerprint %s, want %s", g.ct, g.body, g.exclude, got, g.want)
		}
	}
}
