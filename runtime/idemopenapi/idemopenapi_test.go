package idemopenapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemopenapi"
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

const spec = `openapi: 3.0.3
info: {title: orders, version: "1"}
paths:
  /v1/orders:
    post:
      operationId: createOrder
      requestBody:
        required: true
        content:
          application/json; charset=utf-8:
            schema: {$ref: '#/components/schemas/NewOrder'}
      responses:
        '201': {description: Created.}
components:
  schemas:
    NewOrder:
      type: object
      required: [item, quantity]
      properties:
        item: {type: string, minLength: 1}
        quantity: {type: integer, minimum: 1}
`

type answer struct{ status int }

// TestValidationBeforeTheClaim: with the validator, a body that does not match its schema is
// answered 400 request-invalid naming the member, before anything is claimed; a valid one is
// claimed and runs as without it.
func TestValidationBeforeTheClaim(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	validate, err := idemopenapi.BodyValidator(doc, "POST /v1/orders")
	if err != nil || validate == nil {
		t.Fatalf("BodyValidator: nil validator %v, %v", validate == nil, err)
	}
	e := storetest.NewEnv(t, nil, nil)
	p := &idemhttp.Policy{
		Operation: "createOrder", Route: "POST /v1/orders",
		Key:  idemhttp.KeyRule{Header: "Idempotency-Key", Required: true},
		Body: true, BodyTypes: []string{"application/json; charset=utf-8"},
		ValidateBody: validate,
	}
	ran := 0
	handle := func(key, body string) *idemhttp.Result {
		t.Helper()
		ctx := idemhttp.WithBody(context.Background(), &idemhttp.Body{ContentType: "application/json; charset=utf-8", Bytes: []byte(body)})
		r, err := idemhttp.Handle(ctx, e.Store, p, &idemhttp.Op[answer]{
			Key:   &key,
			Scope: []idemhttp.Part{{Name: "operation"}},
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				ran++
				_, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 1)", key)
				return answer{201}, err
			},
			Record: func(a answer) (*idem.Outcome, error) { return &idem.Outcome{Status: a.status}, nil },
		})
		if err != nil {
			t.Fatalf("Handle(%s): %v", body, err)
		}
		return r
	}
	for _, c := range []struct {
		name, body, field string
	}{
		{"a required member missing", `{}`, `"item"`},
		{"a string too short", `{"item": "", "quantity": 2}`, "/item"},
		{"a value of the wrong type", `{"item": "tea", "quantity": "two"}`, "/quantity"},
		{"a number below its minimum", `{"item": "tea", "quantity": 0}`, "/quantity"},
	} {
		r := handle("k-"+c.name, c.body)
		if r.Kind != idemhttp.ResultProblem || r.Problem.Status != 400 || r.Problem.Code != idemhttp.CodeRequestInvalid {
			t.Errorf("%s: %+v; want 400 request-invalid", c.name, r)
			continue
		}
		if !strings.Contains(r.Problem.Detail, c.field) {
			t.Errorf("%s: detail %q does not name %s", c.name, r.Problem.Detail, c.field)
		}
	}
	if ran != 0 || e.Keys() != 0 {
		t.Fatalf("invalid bodies ran the handler %d times and left %d keys; want none", ran, e.Keys())
	}
	// The key of a refused request is free: corrected, the same key runs.
	if r := handle("k-a string too short", `{"item": "tea", "quantity": 2}`); r.Kind != idemhttp.ResultExecuted || ran != 1 || e.Keys() != 1 {
		t.Fatalf("valid body: %+v (ran %d, %d keys); want executed and claimed", r, ran, e.Keys())
	}
	if r := handle("k-a string too short", `{"quantity": 2, "item": "tea"}`); r.Kind != idemhttp.ResultReplayed || ran != 1 {
		t.Fatalf("its retry: %+v (ran %d); want the replay", r, ran)
	}
}

// TestBodyValidatorErrors: an operation the document lacks is an error; one without a body has
// nothing to validate.
func TestBodyValidatorErrors(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemopenapi.BodyValidator(doc, "PUT /v1/orders"); err == nil || !strings.Contains(err.Error(), `"PUT /v1/orders"`) {
		t.Errorf("unknown operation: %v; want an error naming it", err)
	}
}
