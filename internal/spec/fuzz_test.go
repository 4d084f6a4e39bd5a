package spec

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
)

// FuzzLoadData: no input may panic, and what loads has its diagnostics sorted and positioned.
// The seeds are every golden case; `go test -fuzz FuzzLoadData` explores from there.
func FuzzLoadData(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*", "openapi.yaml"))
	more, _ := filepath.Glob(filepath.Join("testdata", "valid", "*", "openapi.yaml"))
	for _, p := range append(seeds, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// A path in a fresh directory, so relative $refs in fuzzed input find nothing to read.
		s, err := LoadData(filepath.Join(t.TempDir(), "openapi.yaml"), data, nil)
		if err != nil {
			return
		}
		for i, d := range s.Diagnostics {
			if d.Rule == "" || d.Message == "" {
				t.Errorf("diagnostic %d has no rule or message: %+v", i, d)
			}
			if i > 0 {
				p, q := s.Diagnostics[i-1].Pos, d.Pos
				if p.Line > q.Line || (p.Line == q.Line && p.Col > q.Col) {
					t.Errorf("diagnostics out of order: %v then %v", p, q)
				}
			}
		}
	})
}

// policyDoc is the fixed document FuzzPolicy writes its two x-idempotency values into: an
// operation with everything a policy may point at (a path parameter, a key header and a scope
// header, a query parameter, a JSON body, a 201 with a body), so that a value is judged on its own
// merits rather than failing for a missing parameter. %s are the root defaults and the
// operation's value, each already indented to its place.
const policyDoc = `openapi: 3.0.3
info: {title: fuzz, version: "1"}
paths:
  /v1/accounts/{account_id}/payments:
    post:
      operationId: createPayment
      parameters:
        - {name: account_id, in: path, required: true, schema: {type: string}}
        - {name: Idempotency-Key, in: header, schema: {type: string}}
        - {name: X-Tenant, in: header, schema: {type: string}}
        - {name: X-Request-Signature, in: header, schema: {type: string}}
        - {name: trace, in: query, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses:
        "201":
          description: created
          content:
            application/json:
              schema: {type: object}
      x-idempotency:
%s
x-idempotency:
%s
`

// indent puts every line of v at the given depth, so that any YAML value (a scalar, a mapping, a
// flow collection) becomes the value of the key above it.
func indent(v []byte, depth int) string {
	pad := strings.Repeat(" ", depth)
	lines := strings.Split(strings.TrimRight(string(v), "\n"), "\n")
	for i, l := range lines {
		lines[i] = pad + strings.TrimRight(l, "\r")
	}
	return strings.Join(lines, "\n")
}

// policySeeds returns every x-idempotency value written in the golden cases, as YAML, so the
// fuzzer starts from each field and each mistake the rules know.
func policySeeds(f *testing.F) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", "*", "openapi.yaml"))
	more, _ := filepath.Glob(filepath.Join("testdata", "valid", "*", "openapi.yaml"))
	var out [][]byte
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "x-idempotency" {
					b, err := yaml.Marshal(n.Content[i+1])
					if err != nil {
						f.Fatal(err)
					}
					out = append(out, b)
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	for _, p := range append(files, more...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		var n yaml.Node
		if yaml.Unmarshal(data, &n) == nil {
			walk(&n)
		}
	}
	if len(out) == 0 {
		f.Fatal("no x-idempotency value found in testdata: the seeds are gone")
	}
	return out
}

// FuzzPolicy aims at the x-idempotency parser itself: FuzzLoadData mutates whole documents, and
// most of its mutations break the OpenAPI around the extension before the parser sees it. Here
// the document is fixed and only the operation's value and the root defaults vary. Whatever they
// are, loading must not panic, must give the same diagnostics twice, must use only known rule
// ids at positions inside the file, and a policy without errors must hold only values the
// runtime can use (the model is what the templates trust without checking again).
func FuzzPolicy(f *testing.F) {
	seeds := policySeeds(f)
	for i, s := range seeds {
		f.Add(s, []byte("{}"))
		f.Add([]byte("true"), s)
		f.Add(s, seeds[(i+1)%len(seeds)])
	}
	known := map[string]policy.Severity{}
	for _, r := range policy.Rules() {
		known[r.ID] = r.Severity
	}
	f.Fuzz(func(t *testing.T, op, root []byte) {
		doc := []byte(fmt.Sprintf(policyDoc, indent(op, 8), indent(root, 2)))
		path := filepath.Join(t.TempDir(), "openapi.yaml")
		s, err := LoadData(path, doc, nil)
		if err != nil {
			return // not YAML, or not OpenAPI any more: FuzzLoadData covers those paths
		}
		again, err := LoadData(path, doc, nil)
		if err != nil {
			t.Fatalf("second load failed after the first succeeded: %v", err)
		}
		if fmt.Sprint(again.Diagnostics) != fmt.Sprint(s.Diagnostics) {
			t.Fatalf("two loads of one document disagree:\n%v\n%v", s.Diagnostics, again.Diagnostics)
		}
		lines := bytes.Count(doc, []byte("\n")) + 1
		for _, d := range s.Diagnostics {
			sev, ok := known[d.Rule]
			if !ok {
				t.Errorf("diagnostic with a rule id policy.Rules() does not list: %s (%s)", d.Rule, d)
			} else if sev != d.Severity {
				t.Errorf("rule %s is listed as %s but reported as %s: %s", d.Rule, sev, d.Severity, d)
			}
			if d.Pos.File != path || d.Pos.Line < 1 || d.Pos.Line > lines || d.Pos.Col < 1 {
				t.Errorf("diagnostic outside the file (%d lines): %s", lines, d)
			}
			if strings.Contains(d.Message, "%!") {
				t.Errorf("diagnostic with a broken format verb: %s", d)
			}
		}
		if s.HasErrors() {
			return
		}
		for _, o := range s.Model.Idempotent() {
			checkPolicy(t, o)
		}
	})
}

// checkPolicy asserts what the rules promise of a policy that loaded without errors.
func checkPolicy(t *testing.T, o *model.Operation) {
	t.Helper()
	p := o.Policy
	if p.TTL <= 0 || p.Lease <= 0 || p.Wait < 0 || p.Wait > p.Lease {
		t.Errorf("%s: durations the rules forbid: ttl %v, lease %v, wait %v", o.Route(), p.TTL, p.Lease, p.Wait)
	}
	switch p.Storage {
	case policy.StorageResponse, policy.StorageReference, policy.StorageMarker:
	default:
		t.Errorf("%s: storage %q", o.Route(), p.Storage)
	}
	if p.Storage == policy.StorageMarker && p.NoFingerprint {
		t.Errorf("%s: storage marker with the fingerprint off", o.Route())
	}
	if p.Claim != policy.ClaimLease && p.Claim != policy.ClaimTransaction {
		t.Errorf("%s: claim %q", o.Route(), p.Claim)
	}
	if p.MismatchStatus != 400 && p.MismatchStatus != 409 && p.MismatchStatus != 422 {
		t.Errorf("%s: mismatchStatus %d", o.Route(), p.MismatchStatus)
	}
	if len(p.Persist) == 0 {
		t.Errorf("%s: persist is empty", o.Route())
	}
	for _, s := range p.Persist {
		if s == "408" || s == "425" || s == "429" {
			t.Errorf("%s: persist lists %s, which is never stored", o.Route(), s)
		}
	}
	k := p.Key
	if d := p.Delivery; d != nil {
		// A receiver's key is the delivery id, read from the raw request after verification: a
		// header that need not be declared, or a body member.
		if (d.KeyHeader == "") == (d.KeyPointer == "") || k.Header != d.KeyHeader || k.PathParam != "" || !k.Required {
			t.Errorf("%s: a receiver's key must be its delivery id, from exactly one of a header and a body member: %+v, %+v", o.Route(), k, d)
		}
		if p.TTL < d.RetryWindow {
			t.Errorf("%s: a receiver's ttl %v is shorter than its sender's retry window %v", o.Route(), p.TTL, d.RetryWindow)
		}
		k.Header = "" // checked above; not a declared parameter
	} else if (k.Header == "") == (k.PathParam == "") {
		t.Errorf("%s: the key must come from exactly one of a header and a path parameter: %+v", o.Route(), k)
	}
	if k.MaxLength < 1 || k.MaxLength > 255 {
		t.Errorf("%s: key.maxLength %d", o.Route(), k.MaxLength)
	}
	if k.Pattern != "" {
		if _, err := regexp.Compile(k.Pattern); err != nil {
			t.Errorf("%s: key.pattern %q does not compile: %v", o.Route(), k.Pattern, err)
		}
	}
	declared := map[string]bool{}
	for _, prm := range o.Params {
		declared[prm.In+":"+prm.Name] = true
	}
	if k.Header != "" && !declared["header:"+k.Header] {
		t.Errorf("%s: key header %q is not a declared parameter (the generator would find no field)", o.Route(), k.Header)
	}
	if k.PathParam != "" && !declared["path:"+k.PathParam] {
		t.Errorf("%s: key path parameter %q is not declared", o.Route(), k.PathParam)
	}
	for _, sc := range p.Scope {
		switch sc.Kind {
		case "tenant", "operation":
		case "header", "path":
			if !declared[sc.Kind+":"+sc.Name] {
				t.Errorf("%s: scope %s:%s is not a declared parameter", o.Route(), sc.Kind, sc.Name)
			}
		default:
			t.Errorf("%s: scope item of kind %q", o.Route(), sc.Kind)
		}
	}
	for _, e := range p.ExcludeParams {
		if e.In != "header" && e.In != "query" {
			t.Errorf("%s: fingerprint excludes a %s parameter", o.Route(), e.In)
		}
		if !declared[e.In+":"+e.Name] {
			t.Errorf("%s: fingerprint excludes %s:%s, which is not declared", o.Route(), e.In, e.Name)
		}
		if e.In == "header" && strings.EqualFold(e.Name, k.Header) {
			t.Errorf("%s: fingerprint excludes the key header", o.Route())
		}
	}
	for _, e := range p.Exclude {
		if e == "" || e[0] != '/' {
			t.Errorf("%s: fingerprint.exclude %q is not a non-empty JSON pointer", o.Route(), e)
		}
	}
}
