package idemopenapi_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgen/idemgen/runtime/idemopenapi"
)

const specImage = `openapi: 3.1.0
info: {title: files, version: "1"}
paths:
  /v1/images:
    post:
      operationId: putImage
      requestBody:
        required: true
        content:
          image/png:
            schema: {type: string, contentEncoding: base64}
      responses:
        '201': {description: Created.}
  /v1/tags:
    post:
      operationId: addTag
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [tag]
              properties:
                tag: {type: [string, "null"], maxLength: 3}
      responses:
        '201': {description: Created.}
`

func loader(spec string) func() (*openapi3.T, error) {
	return func() (*openapi3.T, error) { return openapi3.NewLoader().LoadFromData([]byte(spec)) }
}

// TestValidation: the checks Body hands out work once Check loaded the document; a media type
// openapi3filter has no decoder for is not refused; an OpenAPI 3.1 schema is read as 3.1 (a
// type list).
func TestValidation(t *testing.T) {
	t.Parallel()
	v := idemopenapi.NewValidation(loader(specImage))
	image, tag := v.Body("POST /v1/images"), v.Body("POST /v1/tags")
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if p := image(ctx, "image/png", []byte{0x89, 'P', 'N', 'G'}); p != nil {
		t.Errorf("a PNG body: %+v; want it passed (no decoder for image/png)", p)
	}
	for _, ok := range []string{`{"tag": "red"}`, `{"tag": null}`} {
		if p := tag(ctx, "application/json", []byte(ok)); p != nil {
			t.Errorf("%s: %+v; want it valid under 3.1's type list", ok, p)
		}
	}
	p := tag(ctx, "application/json", []byte(`{"tag": "crimson"}`))
	if p == nil || p.Status != 400 || !strings.Contains(p.Detail, "/tag") {
		t.Errorf("a tag over maxLength: %+v; want 400 naming /tag", p)
	}
}

// TestValidationCheckErrors: a route the document lacks and a document that does not load are
// Check's errors, named; a check used anyway answers a problem, never the loader's text.
func TestValidationCheckErrors(t *testing.T) {
	t.Parallel()
	v := idemopenapi.NewValidation(loader(specImage))
	v.Body("POST /v1/images")
	v.Body("DELETE /v1/tags")
	if err := v.Check(); err == nil || !strings.Contains(err.Error(), `"DELETE /v1/tags"`) {
		t.Errorf("unknown route: %v; want an error naming it", err)
	}
	broken := idemopenapi.NewValidation(func() (*openapi3.T, error) { return nil, errors.New("flate: corrupt input") })
	check := broken.Body("POST /v1/tags")
	if err := broken.Check(); err == nil || !strings.Contains(err.Error(), "does not load") {
		t.Errorf("broken document: %v; want an error saying it does not load", err)
	}
	p := check(context.Background(), "application/json", []byte(`{}`))
	if p == nil || p.Status != 500 || p.Code != "internal" || strings.Contains(p.Detail, "flate") {
		t.Errorf("a check of a broken document: %+v; want a 500 internal problem without the loader's text", p)
	}
}

// TestRefusalListsEveryPlace: every member that is wrong is reported at once, in the detail (the
// first few) and in the problem's errors, as JSON Pointers into the body.
func TestRefusalListsEveryPlace(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	check, err := idemopenapi.BodyValidator(doc, "POST /v1/orders")
	if err != nil {
		t.Fatal(err)
	}
	p := check(context.Background(), "application/json; charset=utf-8", []byte(`{"item": "", "quantity": 0}`))
	if p == nil || p.Status != 400 || p.Code != "request-invalid" {
		t.Fatalf("two wrong members: %+v; want 400 request-invalid", p)
	}
	want := []string{"#/item: minimum string length is 1", "#/quantity: number must be at least 1"}
	var got []string
	for _, e := range p.Errors {
		got = append(got, e.Pointer+": "+e.Detail)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(p.Detail, "at /item: minimum string length is 1; at /quantity: number must be at least 1") {
		t.Errorf("detail %q does not name both members", p.Detail)
	}
	p = check(context.Background(), "application/json; charset=utf-8", []byte(`{}`))
	if p == nil || len(p.Errors) != 2 || !strings.Contains(p.Detail, `property "item" is missing`) || !strings.Contains(p.Detail, `property "quantity" is missing`) {
		t.Errorf("an empty object: %+v; want both required members named", p)
	}
}

// TestRefusalPointers: pointers are RFC 6901 in their fragment form (escaped "~" and "/",
// percent-encoded), and what the client named is echoed only so far.
func TestRefusalPointers(t *testing.T) {
	t.Parallel()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(`openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /v1/x:
    post:
      requestBody:
        content:
          application/json:
            schema:
              type: object
              additionalProperties: {type: integer}
      responses:
        '201': {description: ok}
`))
	if err != nil {
		t.Fatal(err)
	}
	check, err := idemopenapi.BodyValidator(doc, "POST /v1/x")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("m", 500)
	p := check(context.Background(), "application/json", []byte(`{"a/b~c d": "x", "`+long+`": "x"}`))
	if p == nil || len(p.Errors) != 2 {
		t.Fatalf("two wrong members: %+v", p)
	}
	pointers := []string{p.Errors[0].Pointer, p.Errors[1].Pointer}
	if !slices.Contains(pointers, "#/a~1b~0c%20d") {
		t.Errorf("pointers %q lack #/a~1b~0c%%20d", pointers)
	}
	for _, e := range p.Errors {
		if len(e.Pointer) > 200 || len(e.Detail) > 200 {
			t.Errorf("an error echoes %d and %d bytes; want them bounded", len(e.Pointer), len(e.Detail))
		}
	}
	if len(p.Detail) > 600 {
		t.Errorf("the detail is %d bytes; want it bounded", len(p.Detail))
	}
}

// TestValidationBodyAfterCheck: a check asked for after Check would never be made; asking is a
// programming error, reported at once.
func TestValidationBodyAfterCheck(t *testing.T) {
	t.Parallel()
	v := idemopenapi.NewValidation(loader(specImage))
	v.Body("POST /v1/tags")
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "POST /v1/images") {
			t.Errorf("Body after Check: recovered %v; want a panic naming the route", r)
		}
	}()
	v.Body("POST /v1/images")
}

const specCharset = `openapi: 3.0.3
info: {title: notes, version: "1"}
paths:
  /v1/notes:
    post:
      operationId: addNote
      requestBody:
        required: true
        content:
          application/json; charset=utf-8:
            schema:
              type: object
              required: [text]
              properties:
                text: {type: string, minLength: 1}
      responses:
        '201': {description: Created.}
`

// TestValidationMediaTypeParameters: a body declared as "application/json; charset=utf-8" is
// checked whether the request names the type with that parameter, without it, or in another
// case, as the runtime accepts all three; an invalid body is refused in each spelling.
func TestValidationMediaTypeParameters(t *testing.T) {
	t.Parallel()
	v := idemopenapi.NewValidation(loader(specCharset))
	note := v.Body("POST /v1/notes")
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ct := range []string{"application/json; charset=utf-8", "application/json", "Application/JSON;charset=UTF-8"} {
		if p := note(ctx, ct, []byte(`{"text": "hi"}`)); p != nil {
			t.Errorf("%s, a valid body: %+v; want it passed", ct, p)
		}
		p := note(ctx, ct, []byte(`{"text": ""}`))
		if p == nil || p.Status != 400 || !strings.Contains(p.Detail, "/text") {
			t.Errorf("%s, text too short: %+v; want 400 naming /text", ct, p)
		}
	}
}

// TestEnumRefusalListsTheValuesWhole: a value outside an enum is refused naming every allowed
// value whole, however long the list is in bytes (Open Banking's PaymentContextCode runs past
// the bound of what a refusal echoes), and an enum too long to list is cut between values,
// saying how many more there are.
func TestEnumRefusalListsTheValuesWhole(t *testing.T) {
	t.Parallel()
	codes := []string{"BillingGoodsAndServicesInAdvance", "BillingGoodsAndServicesInArrears", "EcommerceGoods",
		"EcommerceServices", "PartyToParty", "TransferToSelf", "TransferToThirdParty", "PispPayee"}
	many := make([]string, 400)
	for i := range many {
		many[i] = fmt.Sprintf("CODE%04d", i)
	}
	spec := `openapi: 3.0.3
info: {title: payments, version: "1"}
paths:
  /domestic-payments:
    post:
      operationId: createDomesticPayments
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              properties:
                PaymentContextCode: {type: string, enum: [` + strings.Join(codes, ", ") + `]}
                Code: {type: string, enum: [` + strings.Join(many, ", ") + `]}
      responses:
        '201': {description: Created.}
`
	v := idemopenapi.NewValidation(loader(spec))
	check := v.Body("POST /domestic-payments")
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	p := check(context.Background(), "application/json", []byte(`{"PaymentContextCode": "Gift"}`))
	if p == nil || len(p.Errors) != 1 {
		t.Fatalf("a value outside the enum: %+v; want one refused place", p)
	}
	for _, c := range codes {
		if !strings.Contains(p.Errors[0].Detail, `"`+c+`"`) || !strings.Contains(p.Detail, `"`+c+`"`) {
			t.Errorf("the refusal does not name the allowed value %s whole: detail %q, error %q", c, p.Detail, p.Errors[0].Detail)
		}
	}
	if strings.Contains(p.Detail, "…") {
		t.Errorf("the refusal is cut: %q", p.Detail)
	}
	p = check(context.Background(), "application/json", []byte(`{"Code": "nope"}`))
	if p == nil || len(p.Errors) != 1 {
		t.Fatalf("a value outside a long enum: %+v; want one refused place", p)
	}
	reason := p.Errors[0].Detail
	if len(reason) > 1100 || !strings.Contains(reason, `"CODE0000"`) || !regexp.MustCompile(`"CODE\d{4}", and \d+ more\]$`).MatchString(reason) {
		t.Errorf("a 400-value enum is listed as %q (%d bytes); want whole values up to about 1 KiB, then how many more", reason, len(reason))
	}
}
