package generator

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The headers a replay carries without a replayHeaders list: those the responses of stored
// statuses declare, each once, never a credential, a cookie or a hop-by-hop header.
func TestDeclaredHeaders(t *testing.T) {
	t.Parallel()
	const doc = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /v1/payments:
    post:
      operationId: createPayment
      x-idempotency:
        persist: [2xx, 404]
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      responses:
        '201':
          description: created
          headers:
            X-Jws-Signature: {schema: {type: string}}
            Set-Cookie: {schema: {type: string}}
            Connection: {schema: {type: string}}
            Proxy-Status: {schema: {type: string}}
            Authorization: {schema: {type: string}}
        '2XX':
          description: other successes
          headers:
            x-jws-signature: {schema: {type: string}}
            X-Range: {schema: {type: string}}
        '404':
          description: no such thing
          headers:
            X-Missing: {schema: {type: string}}
        '409':
          description: not stored
          headers:
            X-Conflict: {schema: {type: string}}
        '5XX':
          description: never stored
          headers:
            X-Outage: {schema: {type: string}}
        default:
          description: anything else
          headers:
            X-Request-Id: {schema: {type: string}}
`
	path := filepath.Join(t.TempDir(), "openapi.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	in := load(t, path)
	op := in.Model.Idempotent()[0]
	// The model keeps every declared header, by status then name, at its key in the file.
	if h := op.ResponseHeaders[0]; h.Status != "201" || h.Name != "Authorization" || h.Pos.Line != 19 || h.Pos.Col != 13 {
		t.Errorf("the first declared header is %+v, want Authorization of 201 at 19:13", h)
	}
	if n := len(op.ResponseHeaders); n != 11 {
		t.Errorf("%d declared headers in the model, want all 11", n)
	}
	want := []string{"X-Jws-Signature", "X-Missing", "X-Range", "X-Request-Id"}
	if got := declaredHeaders(op); !slices.Equal(got, want) {
		t.Errorf("declaredHeaders = %q, want %q", got, want)
	}
	files, err := Generate(in, Options{Package: "api"})
	if err != nil {
		t.Fatal(err)
	}
	line := `DeclaredHeaders: []string{"X-Jws-Signature", "X-Missing", "X-Range", "X-Request-Id"},`
	if src := string(files["idempotency.gen.go"]); !strings.Contains(src, line) {
		t.Errorf("the generated policy has no %s:\n%s", line, src)
	}
}
