package spec

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/idemgen/idemgen/internal/policy"
)

// TestFingerprintExcludeModel: fingerprint.exclude splits into body pointers and parameters, a
// header keeps the spelling it is declared with (here on the path item, in lower case), a query
// name matches exactly, and with the fingerprint off inherited exclusions are dropped unchecked.
func TestFingerprintExcludeModel(t *testing.T) {
	t.Parallel()
	const doc = `openapi: 3.0.3
info: {title: x, version: "1"}
x-idempotency:
  fingerprint: {exclude: [header:X-Undeclared-Here, /sent_at]}
paths:
  /v1/orders:
    parameters:
      - {name: x-request-id, in: header, schema: {type: string}}
    post:
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
        - {name: sentAt, in: query, schema: {type: string}}
      x-idempotency:
        fingerprint: {exclude: [/client_time, header:X-REQUEST-ID, query:sentAt]}
      responses: {"201": {description: ok}}
  /v1/notes:
    post:
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
      x-idempotency: {fingerprint: false}
      responses: {"201": {description: ok}}
`
	s, err := LoadData("openapi.yaml", []byte(doc), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Diagnostics {
		t.Errorf("unexpected diagnostic: %s [%s]", d, d.Rule)
	}
	type got struct {
		Exclude       []string
		ExcludeParams []policy.ParamRef
		NoFingerprint bool
	}
	want := map[string]got{
		"POST /v1/notes": {NoFingerprint: true},
		"POST /v1/orders": {
			Exclude:       []string{"/client_time"},
			ExcludeParams: []policy.ParamRef{{In: "header", Name: "x-request-id"}, {In: "query", Name: "sentAt"}},
		},
	}
	have := map[string]got{}
	for _, op := range s.Model.Idempotent() {
		have[op.Route()] = got{op.Policy.Exclude, op.Policy.ExcludeParams, op.Policy.NoFingerprint}
	}
	if diff := cmp.Diff(want, have); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
}
