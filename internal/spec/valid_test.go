package spec

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
)

// TestValidFull loads a spec that uses every feature correctly (document defaults, local file
// $refs, path item parameters, lower-case header names, path keys, every storage and claim mode)
// and compares the whole model.
func TestValidFull(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "valid", "full", "openapi.yaml")
	s, err := Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Diagnostics {
		t.Errorf("unexpected diagnostic: %s [%s]", d, d.Rule)
	}
	at := func(line, col int) model.Position { return model.Position{File: file, Line: line, Col: col} }
	// The key parameter's schema (in common.yaml) bounds it to 255 characters: the rule is
	// placed at the parameter's $ref in this file.
	key := model.Param{Name: "Idempotency-Key", In: "header", Pos: at(12, 9), MaxLength: 255, MaxLengthPos: at(12, 9)}
	defaults := func(p policy.Policy) *policy.Policy {
		if p.Storage == "" {
			p.Storage = policy.StorageResponse
		}
		if p.TTL == 0 {
			p.TTL = 48 * time.Hour
		}
		if p.Lease == 0 {
			p.Lease = time.Minute
		}
		if p.Timeout == 0 {
			p.Timeout = p.Lease // the built-in default
		}
		if p.Claim == "" {
			p.Claim = policy.ClaimLease
		}
		if p.MismatchStatus == 0 {
			p.MismatchStatus = 422
		}
		if p.Persist == nil {
			p.Persist = []string{"2xx", "4xx"}
		}
		if p.Scope == nil {
			p.Scope = []policy.ScopeItem{{Kind: "tenant"}, {Kind: "operation"}}
		}
		if p.Key.MaxLength == 0 {
			p.Key.MaxLength = 255
		}
		if p.ReplayHeaders == nil {
			p.ReplayHeaders = []string{"X-Request-Cost"}
		}
		if p.Renderer == "" {
			p.Renderer = policy.RendererProblem
		}
		return &p
	}
	withBody := policy.Responses{AnySuccess: true, SuccessBody: true}
	noBody := policy.Responses{AnySuccess: true}
	want := &model.Document{File: file, Operations: []*model.Operation{
		{
			Method: "POST", Path: "/v1/accounts/{account_id}/refunds", Pos: at(34, 5),
			Params: []model.Param{
				{Name: "account_id", In: "path", Required: true, Pos: at(44, 12)},
				{Name: "idempotency-key", In: "header", Pos: at(45, 12)},
				{Name: "X-Account", In: "header", Required: true, Pos: at(46, 11)},
			},
			Body: model.BodyForm, BodyTypes: []string{"application/x-www-form-urlencoded"},
			Responses: withBody,
			Policy: defaults(policy.Policy{
				Pos: at(35, 7), Storage: policy.StorageReference, Claim: policy.ClaimTransaction,
				Wait: 5 * time.Second, Lease: 30 * time.Second, Timeout: 20 * time.Second,
				Scope: []policy.ScopeItem{{Kind: "tenant"}, {Kind: "path", Name: "account_id"}, {Kind: "header", Name: "X-Account"}},
				Key:   policy.Key{Header: "idempotency-key", MaxLength: 64, Pattern: "^[0-9a-f-]{36}$"},
			}),
		},
		{
			ID: "checkoutCart", Method: "PUT", Path: "/v1/carts/{cart_id}/checkout", Pos: at(61, 5),
			Params: []model.Param{
				{Name: "cart_id", In: "path", Required: true, Pos: at(59, 10)},
				{Name: "X-Trace", In: "header", Required: true, Pos: at(64, 12)},
			},
			Body: model.BodyJSON, BodyTypes: []string{"application/merge-patch+json"},
			Responses: noBody,
			Policy: defaults(policy.Policy{
				Pos: at(65, 7), Storage: policy.StorageMarker,
				Key:           policy.Key{PathParam: "cart_id", Required: true},
				ReplayHeaders: []string{},
			}),
		},
		{
			ID: "listPayments", Method: "GET", Path: "/v1/payments", Pos: at(29, 5),
			Params: []model.Param{key}, Responses: noBody,
		},
		{
			ID: "createPayment", Method: "POST", Path: "/v1/payments", Pos: at(13, 5),
			Params: []model.Param{key},
			Body:   model.BodyJSON, BodyTypes: []string{"application/json"},
			Responses: withBody,
			Policy: defaults(policy.Policy{
				Pos: at(15, 7), MismatchStatus: 409,
				Exclude: []string{"/metadata/sent_at", "/a~1b"},
				Key:     policy.Key{Header: "Idempotency-Key", Required: true},
			}),
		},
		{
			ID: "upload", Method: "POST", Path: "/v1/uploads", Pos: at(76, 5),
			Body: model.BodyMultipart, BodyTypes: []string{"multipart/form-data"},
			Responses: noBody,
		},
		{
			ID: "deleteUploads", Method: "DELETE", Path: "/v1/uploads", Pos: at(85, 5),
			Params:    []model.Param{{Name: "Idempotency-Key", In: "header", Pos: at(89, 11), MaxLength: 255, MaxLengthPos: at(89, 11)}},
			Responses: noBody,
			Policy: defaults(policy.Policy{
				Pos: at(87, 7),
				Key: policy.Key{Header: "Idempotency-Key", Required: true},
			}),
		},
	}}
	if diff := cmp.Diff(want, s.Model); diff != "" {
		t.Errorf("model mismatch (-want +got):\n%s", diff)
	}
	if got := len(s.Model.Idempotent()); got != 4 {
		t.Errorf("Idempotent() = %d operations, want 4", got)
	}
}

// TestJSONPositions checks that a JSON spec gets the same precise positions as YAML, through
// yaml.v3 and through the token walker used when yaml.v3 refuses the JSON.
func TestJSONPositions(t *testing.T) {
	t.Parallel()
	const doc = `{
  "openapi": "3.0.3",
  "info": {"title": "j", "version": "1"},
  "paths": {
    "/v1/payments": {
      "post": {
        "parameters": [{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"}}],
        "x-idempotency": {"ttl": "5x", "storage": "marker", "fingerprint": false},
        "responses": {"201": {"description": "created"}}
      }
    }
  }
}
`
	want := strings.Join([]string{
		`openapi.json:8:34: POST /v1/payments: x-idempotency.ttl: "5x" is not a duration (use e.g. 24h or 3d)`,
		`openapi.json:8:76: POST /v1/payments: x-idempotency.fingerprint: storage marker keeps only the status and the fingerprint, so the fingerprint cannot be off (remove fingerprint: false, or use storage: response)`,
	}, "\n")
	check := func(t *testing.T, data string) {
		s, err := LoadData("openapi.json", []byte(data), nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range s.Diagnostics {
			got = append(got, d.String())
		}
		if diff := cmp.Diff(want, strings.Join(got, "\n")); diff != "" {
			t.Errorf("diagnostics (-want +got):\n%s", diff)
		}
	}
	t.Run("yaml.v3", func(t *testing.T) { check(t, doc) })
	// yaml.v3 refuses JSON's \/ escape and surrogate pairs, which generated specs often contain.
	escaped := strings.Replace(doc, `"title": "j"`, `"title": "j\/k \ud83d\ude00"`, 1)
	t.Run("yaml.v3 refuses, token walker reads", func(t *testing.T) {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(escaped), &n); err == nil {
			t.Fatal("yaml.v3 now reads JSON escapes; this subtest no longer exercises the fallback")
		}
		check(t, escaped)
	})
	t.Run("token walker", func(t *testing.T) {
		root, err := jsonTree([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		_, paths := lookup(root, "paths")
		_, item := lookup(paths, "/v1/payments")
		_, post := lookup(item, "post")
		_, ext := lookup(post, "x-idempotency")
		_, ttl := lookup(ext, "ttl")
		_, fp := lookup(ext, "fingerprint")
		if ttl.Line != 8 || ttl.Column != 34 || fp.Line != 8 || fp.Column != 76 || fp.Tag != "!!bool" {
			t.Errorf("token walker positions: ttl %d:%d, fingerprint %d:%d %s; want 8:34 and 8:76 !!bool", ttl.Line, ttl.Column, fp.Line, fp.Column, fp.Tag)
		}
	})
}

// TestYAMLAnchors: defaults shared through an anchor and a merge key read like inline values.
func TestYAMLAnchors(t *testing.T) {
	t.Parallel()
	const doc = `openapi: 3.0.3
info: {title: a, version: "1"}
x-common: &common {ttl: 3d, storage: cash}
paths:
  /v1/a:
    post:
      parameters: [{name: Idempotency-Key, in: header, schema: {type: string}}]
      x-idempotency:
        <<: *common
        lease: 10s
      responses: {"201": {description: ok}}
`
	s, err := LoadData("openapi.yaml", []byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range s.Diagnostics {
		got = append(got, d.String())
	}
	want := `openapi.yaml:3:38: POST /v1/a: x-idempotency.storage: "cash" is not a storage mode (use response, reference or marker)`
	if diff := cmp.Diff(want, strings.Join(got, "\n")); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
	p := s.Model.Operations[0].Policy
	if p == nil || p.TTL != 72*time.Hour || p.Lease != 10*time.Second {
		t.Errorf("policy = %+v, want ttl 72h and lease 10s", p)
	}
}

// TestRemoteRefs serves a shared parameter from a local HTTP server: refused by default with
// RemoteRefError, read when AllowRemoteRefs is set.
func TestRemoteRefs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "IdempotencyKey: {name: Idempotency-Key, in: header, schema: {type: string}}\n")
	}))
	defer srv.Close()
	doc := `openapi: 3.0.3
info: {title: remote, version: "1"}
paths:
  /v1/payments:
    post:
      parameters:
        - $ref: "` + srv.URL + `/common.yaml#/IdempotencyKey"
      x-idempotency: true
      responses:
        "201": {description: created}
`
	_, err := LoadData("openapi.yaml", []byte(doc), nil)
	var refused *RemoteRefError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "openapi.yaml: remote $ref") {
		t.Errorf("default: err = %v; want a RemoteRefError naming the file", err)
	}
	s, err := LoadData("openapi.yaml", []byte(doc), &LoadOpts{AllowRemoteRefs: true})
	if err != nil {
		t.Fatalf("AllowRemoteRefs: %v", err)
	}
	if s.HasErrors() || s.Model.Operations[0].Policy.Key.Header != "Idempotency-Key" {
		t.Errorf("AllowRemoteRefs: diagnostics %v, policy %+v; want the remote header as the key", s.Diagnostics, s.Model.Operations[0].Policy)
	}
}

// TestPathItemRef: an operation that lives in another file through a path item $ref is still
// read, and its diagnostics point at the $ref'd path in the spec the user ran idemgen on.
func TestPathItemRef(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "valid", "pathref", "openapi.yaml")
	s, err := Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range s.Diagnostics {
		got = append(got, d.String())
	}
	want := file + `:4:3: POST /v1/payments: x-idempotency.ttl: "5x" is not a duration (use e.g. 24h or 3d)`
	if diff := cmp.Diff(want, strings.Join(got, "\n")); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
	ops := s.Model.Operations
	if len(ops) != 1 || ops[0].ID != "createPayment" || ops[0].Policy == nil || ops[0].Policy.Storage != "marker" || ops[0].Policy.Key.Header != "Idempotency-Key" {
		t.Errorf("operations = %+v; want createPayment with a marker policy keyed by Idempotency-Key", ops)
	}
}
