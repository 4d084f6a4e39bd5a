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
//
// Generated code with validate-request-body in idemgen.yaml uses [NewValidation] on the spec it
// embeds; [BodyValidator] serves a hand-written wiring.
package idemopenapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

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
	// Defaults are not written back: the handler gets oapi-codegen's binding of the body as
	// sent, so rewriting the copy checked here would only cost an encoding. Every member that
	// is wrong is reported, so one round trip tells the client all it has to fix.
	opts := &openapi3filter.Options{SkipSettingDefaults: true, MultiError: true}
	if doc.IsOpenAPI31OrLater() {
		opts.SchemaValidationOptions = []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()}
	}
	declared := declaredTypes(rb.Content)
	return func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem {
		req, err := http.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
		if err != nil {
			return problem("the request could not be checked against the API's schema")
		}
		if contentType != "" {
			req.Header.Set("Content-Type", declaredType(rb.Content, declared, contentType))
		}
		in := &openapi3filter.RequestValidationInput{Request: req, Options: opts}
		err = openapi3filter.ValidateRequestBody(ctx, in, rb)
		if err == nil || unchecked(err) {
			return nil
		}
		return refusal(err)
	}, nil
}

// declaredTypes maps each media type the body declares, without its parameters and in lower
// case, to the first key of content that declares it ("application/json" to
// "application/json; charset=utf-8").
func declaredTypes(content openapi3.Content) map[string]string {
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bases := make(map[string]string, len(keys))
	for _, k := range keys {
		if base := baseType(k); base != "" {
			if _, ok := bases[base]; !ok {
				bases[base] = k
			}
		}
	}
	return bases
}

// declaredType is the key of content the request's contentType stands for. openapi3filter
// finds a declared type only by the request's own spelling, or by the request's type with its
// parameters removed, so a request sent as "application/json" against a body declared as
// "application/json; charset=utf-8" would be refused, although the runtime accepts it (media
// types compare without their parameters). The key found is what openapi3filter is shown; the
// decoder it picks depends on the type alone, so the body is read the same way.
func declaredType(content openapi3.Content, declared map[string]string, contentType string) string {
	if _, ok := content[contentType]; ok {
		return contentType
	}
	if k, ok := declared[baseType(contentType)]; ok {
		return k
	}
	return contentType
}

// baseType is mediaType without its parameters, in lower case.
func baseType(mediaType string) string {
	base, _, _ := strings.Cut(mediaType, ";")
	return strings.ToLower(strings.TrimSpace(base))
}

// unchecked reports whether err says the body's media type has no decoder in openapi3filter
// (an image, a vendor type): such a body is not validated, as a middleware that cannot read
// it would not refuse it either. Which media types the operation accepts is the runtime's
// check (415 media-type-unsupported), made before this one.
func unchecked(err error) bool {
	var pe *openapi3filter.ParseError
	return errors.As(err, &pe) && pe.Kind == openapi3filter.KindUnsupportedFormat
}

func problem(detail string) *idemhttp.Problem {
	return idemhttp.NewProblem(http.StatusBadRequest, idemhttp.CodeRequestInvalid, detail)
}

// Bounds of what a refusal lists: the detail names the first few places, Errors a few more,
// and neither echoes more than echoMax bytes of one (member names are the client's). An enum's
// allowed values are the spec's, not the client's, and the client needs them whole to correct
// its request: they are listed value by value up to enumMax bytes, then counted.
const (
	detailPlaces = 3
	errorPlaces  = 20
	echoMax      = 128
	enumMax      = 1024
)

// refusal is the 400 request-invalid problem for err: its detail says where the body went wrong,
// in the schema's words and without Go text, and its Errors list each place.
func refusal(err error) *idemhttp.Problem {
	places := schemaErrors(err, nil)
	if len(places) == 0 {
		return problem(detail(err))
	}
	p := problem("")
	var at []string
	for _, se := range places {
		path, reason := se.JSONPointer(), reasonOf(se)
		if len(p.Errors) < errorPlaces {
			p.Errors = append(p.Errors, idemhttp.ProblemError{Pointer: fragment(path), Detail: reason})
		}
		if len(at) < detailPlaces {
			where := "its top level"
			if len(path) > 0 {
				where = bounded("/" + strings.Join(path, "/"))
			}
			at = append(at, fmt.Sprintf("at %s: %s", where, reason))
		}
	}
	p.Detail = "the request body does not match the API's schema " + strings.Join(at, "; ")
	if more := len(places) - len(at); more > 0 {
		p.Detail += fmt.Sprintf("; and %d more (see errors)", more)
	}
	return p
}

// reasonOf is se's reason in the schema's words, bounded: an enum's allowed values are listed
// whole (enumReason), any other reason is cut at echoMax bytes.
func reasonOf(se *openapi3.SchemaError) string {
	if se.SchemaField == "enum" && se.Schema != nil && len(se.Schema.Enum) > 0 {
		return enumReason(se.Schema.Enum)
	}
	return bounded(se.Reason)
}

// enumReason says which values enum allows, each whole as JSON: as many as fit in enumMax bytes,
// then how many more there are, so no value is ever cut.
func enumReason(enum []any) string {
	var b strings.Builder
	b.WriteString("value is not one of the allowed values [")
	for i, v := range enum {
		js, err := json.Marshal(v)
		if err != nil {
			js = []byte("?")
		}
		if i > 0 && b.Len()+len(js)+2 > enumMax {
			fmt.Fprintf(&b, ", and %d more", len(enum)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(js)
	}
	b.WriteString("]")
	return b.String()
}

// fragment writes path as a JSON Pointer (RFC 6901) in its URI fragment form: "#/items/0/name".
func fragment(path []string) string {
	var b strings.Builder
	b.WriteString("#")
	for _, seg := range path {
		b.WriteString("/")
		b.WriteString(url.PathEscape(pointerEscaper.Replace(seg)))
	}
	return bounded(b.String())
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// bounded cuts s to echoMax bytes, at a character boundary.
func bounded(s string) string {
	if len(s) <= echoMax {
		return s
	}
	cut := echoMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// schemaErrors flattens the schema errors in err, in the validator's order. A schema error is
// taken whole, not for the errors it wraps: a oneOf that no branch matched is one place, not
// each branch's complaint.
func schemaErrors(err error, out []*openapi3.SchemaError) []*openapi3.SchemaError {
	switch e := err.(type) {
	case nil:
	case *openapi3.SchemaError:
		out = append(out, e)
	case openapi3.MultiError:
		for _, inner := range e {
			out = schemaErrors(inner, out)
		}
	default:
		out = schemaErrors(errors.Unwrap(err), out)
	}
	return out
}

// detail says what is wrong with a body that has no schema error to name (it is missing, or
// could not be decoded as its media type).
func detail(err error) string {
	var re *openapi3filter.RequestError
	if errors.As(err, &re) && errors.Is(err, openapi3filter.ErrInvalidRequired) {
		return "the request body is missing: this operation requires one"
	}
	if errors.As(err, &re) && re.Reason != "" {
		return "the request body does not match the API's schema: " + bounded(re.Reason)
	}
	return "the request body does not match the API's schema: check it against the operation's request body"
}

// Validation is the body checks of one document's operations, made on first use: generated
// code declares one over the spec it embeds (oapi-codegen's GetSpec), asks it for each
// operation's check while its policies are initialised, and calls [Validation.Check] when a
// server is built, so that a document that does not load stops the server at startup rather
// than failing requests. It is safe for concurrent use.
type Validation struct {
	load   func() (*openapi3.T, error)
	routes []string // asked for by Body, before any use

	once    sync.Once
	checked atomic.Bool // Check has run: Body may no longer add routes
	checks  map[string]func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem
	err     error
}

// NewValidation returns the checks of the document load returns; load runs once, at the first
// Check or validated request.
func NewValidation(load func() (*openapi3.T, error)) *Validation {
	return &Validation{load: load}
}

// Body returns the check of route's body (route as idemhttp.Policy.Route writes it), for
// idemhttp.Policy.ValidateBody. Call it before the first Check, as package-level policies are
// initialised; the document is read later. It panics when called after Check, whose checks
// would not include route: that is a programming error, not a request's.
func (v *Validation) Body(route string) func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem {
	if v.checked.Load() {
		panic("idemopenapi: Validation.Body(" + route + ") called after Check: ask for every route's check first")
	}
	v.routes = append(v.routes, route)
	return func(ctx context.Context, contentType string, body []byte) *idemhttp.Problem {
		if v.Check() != nil {
			// Check failed at startup too, and the server refused to start: a wiring that
			// skipped it gets a problem, never the loader's text.
			return idemhttp.NewProblem(http.StatusInternalServerError, idemhttp.CodeInternal,
				"this server's request validation is not set up, so it changed nothing: its operator must fix the embedded API document")
		}
		if check := v.checks[route]; check != nil {
			return check(ctx, contentType, body)
		}
		return nil
	}
}

// Check loads the document and makes the check of every route Body was asked for; its error
// names what failed.
func (v *Validation) Check() error {
	v.once.Do(func() {
		v.checked.Store(true)
		doc, err := v.load()
		if err != nil {
			v.err = fmt.Errorf("idemopenapi: the API document for request validation does not load: %w", err)
			return
		}
		v.checks = map[string]func(context.Context, string, []byte) *idemhttp.Problem{}
		var errs []error
		for _, route := range slices.Compact(slices.Sorted(slices.Values(v.routes))) {
			check, err := BodyValidator(doc, route)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			v.checks[route] = check
		}
		v.err = errors.Join(errs...)
	})
	return v.err
}
