package idemhttp_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// TestRequestProblemNamesTheMember: a decoding error names the member the body got wrong,
// whether the router hands over encoding/json's typed error or only its text (fiber), and shows
// none of Go's words.
func TestRequestProblemNamesTheMember(t *testing.T) {
	t.Parallel()
	type item struct {
		Name     string `json:"name"`
		Quantity int    `json:"quantity"`
		Box      struct {
			Size int `json:"size"`
		} `json:"box"`
	}
	for _, c := range []struct{ body, member, kind string }{
		{`{"quantity": "two"}`, `"quantity"`, "string"},
		{`{"quantity": 2.5}`, `"quantity"`, "number"},
		{`{"name": 7}`, `"name"`, "number"},
		{`{"box": {"size": []}}`, `"box.size"`, "array"},
	} {
		var v item
		err := json.Unmarshal([]byte(c.body), &v)
		if err == nil {
			t.Fatalf("%s decoded", c.body)
		}
		for _, e := range []error{err, errors.New(err.Error())} {
			p := idemhttp.RequestProblem(e)
			if p.Status != 400 || p.Code != idemhttp.CodeRequestInvalid || !strings.Contains(p.Detail, c.member) ||
				!strings.Contains(p.Detail, "JSON "+c.kind) || strings.Contains(p.Detail, "Go ") || strings.Contains(p.Detail, "int") {
				t.Errorf("%s (%T): %d %s %q; want 400 request-invalid naming %s as a JSON %s, without Go's words", c.body, e, p.Status, p.Code, p.Detail, c.member, c.kind)
			}
		}
	}
}
