// Package idemopenapi validates request bodies against an OpenAPI document before the
// idempotency runtime claims a key, with kin-openapi's openapi3filter (what oapi-codegen's
// validator middlewares use). It is a package of its own so that a server that does not validate
// does not link kin-openapi.
//
// The check runs inside the generated adapter (idemhttp.Handle), on the body exactly as the
// client sent it (the one the fingerprint covers), so it is the same on every router. A body
// that does not match its schema (a required member missing, a string too short, a value of
// the wrong type) is answered 400 request-invalid, naming the member, and binds no key: a
// corrected retry with the same key runs. Parameters are bound, and their types checked, by
// oapi-codegen's generated code before the adapter runs.
package idemopenapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// BodyValidator returns the body check of the operation at route ("POST /v1/orders", as
// idemhttp.Policy.Route writes it) in doc, for idemhttp.Policy.ValidateBody; nil when the
// operation declares no request body. doc must be loaded with its references resolved (an
// openapi3.Loader does that). It fails when doc has no such operation.
func BodyValidator(doc *openapi3.T, route string) (func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem, error) {
	method, path, ok := strings.Cut(route, " ")
	if !ok || doc == nil || doc.Paths == nil {
		return nil, fmt.Errorf("idemopenapi: no operation %q in the document", route)
	}
	item := doc.Paths.Value(path)
	if item == nil || item.GetOperation(strings.ToUpper(method)) == nil {
		return nil, fmt.Errorf("idemopenapi: no operation %q in the document", route)
	}
	op := item.GetOperation(strings.ToUpper(method))
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil, nil
	}
	rb := op.RequestBody.Value
	opts := &openapi3filter.Options{}
	return func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem {
		req, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
		if err != nil {
			return problem("the request could not be checked against the API's schema")
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		in := &openapi3filter.RequestValidationInput{Request: req, Options: opts}
		if err := openapi3filter.ValidateRequestBody(ctx, in, rb); err != nil {
			return problem(detail(err))
		}
		return nil
	}, nil
}

func problem(detail string) *idemhttp.Problem {
	return idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid, detail)
}

// detail says where the body went wrong, in the schema's words, without Go text.
func detail(err error) string {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		at := "/" + strings.Join(se.JSONPointer(), "/")
		if at == "/" {
			at = "its top level"
		}
		return fmt.Sprintf("the request body does not match the API's schema at %s: %s", at, se.Reason)
	}
	var re *openapi3filter.RequestError
	if errors.As(err, &re) && re.Reason != "" {
		return "the request body does not match the API's schema: " + re.Reason
	}
	return "the request body does not match the API's schema: check it against the operation's request body"
}
