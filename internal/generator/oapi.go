package generator

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/spec"
)

// oapiMu serializes every use of oapi-codegen: codegen.Generate and codegen.OperationDefinitions
// read and write package-level state (options, name normalizer, the spec being rendered), so two
// generations running at once would corrupt each other.
var oapiMu sync.Mutex

// oapiResult is what one oapi-codegen run gives us: its source and, per route, the names and
// types it chose, so our template refers to exactly the identifiers it emitted.
type oapiResult struct {
	Code string
	Ops  []*oapiOp // path operations in oapi-codegen's order (path, then method)
}

// oapiOp is oapi-codegen's view of one operation, reduced to plain values.
type oapiOp struct {
	Route  string // "POST /v1/payments", matching model.Operation.Route
	GoName string // the normalised operationId: CreatePayment
	// Alias is a path item that $refs another path's item; oapi-codegen serves it through the
	// canonical operation's method, so it has no method of its own.
	Alias  bool
	Params []oapiParam
	Bodies []oapiBody
}

// oapiParam is one parameter of the strict request object.
type oapiParam struct {
	Name     string // as declared
	In       string
	GoName   string // field name: in the request object for path params, in .Params otherwise
	Pointer  bool   // the field is *T (optional parameter)
	Required bool
	// Plain: the field holds the parameter's text as sent, a string (or a type defined as one)
	// of a schema with no format and no Go type of its own (plainStringParam).
	Plain bool
}

// plainStringParam says whether oapi-codegen binds prm into a string field (or one of a type
// defined as a string, which encodes and prints alike) with the text the request carries: its
// schema is a plain string (no format, which can make it a UUID, a date or bytes) and names no Go
// type of its own (x-go-type), and it is not content-encoded.
func plainStringParam(prm *openapi3.Parameter) bool {
	if prm == nil || prm.Schema == nil || prm.Schema.Value == nil || len(prm.Content) > 0 {
		return false
	}
	s := prm.Schema.Value
	_, goType := s.Extensions["x-go-type"]
	return s.Type != nil && s.Type.Is(openapi3.TypeString) && s.Format == "" && !goType
}

// oapiBody is one request body field of the strict request object.
type oapiBody struct {
	Field       string // Body, or JSONBody/FormdataBody when there are several
	ContentType string
	Kind        model.BodyKind
}

// oapiConfiguration returns the configuration for one run, from o.OapiCodegen (the
// configuration file's passthrough, if any) and the options idemgen's own code depends on.
// Pruning stays off: oapi-codegen's pruner drops schemas that only webhooks use, which makes
// real 3.1 specs fail to compile. o has been validated (its Router is set).
func oapiConfiguration(o Options) (codegen.Configuration, error) {
	var c codegen.Configuration
	if o.OapiCodegen != nil {
		c = *o.OapiCodegen
	} else {
		c.OutputOptions.SkipPrune = true
	}
	c.PackageName = o.Package
	// The passthrough cannot choose a server (ParseConfig refuses generate:), but a copy made
	// by a caller might: exactly one server is generated, the one the router names.
	c.Generate.StdHTTPServer, c.Generate.ChiServer, c.Generate.GorillaServer = false, false, false
	c.Generate.EchoServer, c.Generate.Echo5Server, c.Generate.GinServer = false, false, false
	c.Generate.FiberServer, c.Generate.FiberV3Server, c.Generate.IrisServer = false, false, false
	o.Router.server(&c.Generate)
	c.Generate.Strict = true
	c.Generate.Models = true
	c.Generate.Client = o.Client
	// The validators read the document oapi-codegen generated from, which it embeds (GetSpec)
	// so that a server reads no file at startup.
	c.Generate.EmbeddedSpec = c.Generate.EmbeddedSpec || o.ValidateRequestBody
	// Our template refers to the operations' types and strict interface, so nothing may be
	// filtered out and the names must follow the default normaliser.
	c.OutputOptions.IncludeTags = nil
	c.OutputOptions.ExcludeTags = nil
	c.OutputOptions.IncludeOperationIDs = nil
	c.OutputOptions.ExcludeOperationIDs = nil
	c.OutputOptions.UserTemplates = nil
	// Formatting happens once, in our pipeline, after the header is replaced.
	c.OutputOptions.SkipFmt = true
	// A fixed version keeps the output identical whoever builds idemgen.
	noVersion := ""
	c.NoVCSVersionOverride = &noVersion
	c = c.UpdateDefaults()
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("oapi-codegen options: %w", err)
	}
	return c, nil
}

// loadFresh parses raw again so oapi-codegen, which rewrites operationIds and other fields in
// place, never sees the document the model was built from nor the user's file. It reads $refs
// the way spec.Load does (the same loader, the same refusal of remote refs).
func loadFresh(file string, raw []byte, allowRemote bool) (*openapi3.T, error) {
	return spec.NewLoader(&spec.LoadOpts{AllowRemoteRefs: allowRemote}).LoadFromDataWithPath(raw, &url.URL{Path: filepath.ToSlash(file)})
}

// runOapiCodegen renders models, strict server and router for doc, whose key headers it first
// makes optional (see relaxKeyHeaders), and collects oapi-codegen's names for the operations in
// ops. A panic inside oapi-codegen becomes an error.
func runOapiCodegen(file string, doc *openapi3.T, ops []*model.Operation, cfg codegen.Configuration) (res *oapiResult, err error) {
	relaxKeyHeaders(doc, ops)
	relaxDeliveryHeaders(doc, ops)

	oapiMu.Lock()
	defer oapiMu.Unlock()
	var code string
	var defs []codegen.OperationDefinition
	err = recoverPanic(func() error {
		var err error
		if code, err = codegen.Generate(doc, cfg); err != nil {
			return err
		}
		// OperationDefinitions needs the normaliser Generate just configured. Generate has
		// rewritten doc's operationIds to their normalised form, which the normaliser leaves
		// unchanged, so the names come out as Generate used them.
		defs, err = codegen.OperationDefinitions(doc)
		return err
	})
	if err != nil {
		return nil, err
	}
	res = &oapiResult{Code: code}
	for _, d := range defs {
		op := &oapiOp{Route: strings.ToUpper(d.Method) + " " + d.Path, GoName: d.OperationId, Alias: d.IsAlias}
		for _, group := range [][]codegen.ParameterDefinition{d.PathParams, d.QueryParams, d.HeaderParams, d.CookieParams} {
			for _, p := range group {
				op.Params = append(op.Params, oapiParam{
					Name:     p.ParamName,
					In:       p.In,
					GoName:   p.GoName(),
					Pointer:  p.HasOptionalPointer(),
					Required: p.Required,
					Plain:    plainStringParam(p.Spec),
				})
			}
		}
		for _, b := range d.Bodies {
			kind := model.ClassifyMediaType(b.ContentType)
			field := "Body"
			if len(d.Bodies) > 1 {
				field = b.NameTag + "Body"
			}
			op.Bodies = append(op.Bodies, oapiBody{Field: field, ContentType: b.ContentType, Kind: kind})
		}
		res.Ops = append(res.Ops, op)
	}
	return res, nil
}

// recoverPanic runs fn and turns a panic into an error carrying the top of the stack, so a bug
// inside oapi-codegen is reported as a failure on the spec instead of crashing idemgen.
func recoverPanic(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("oapi-codegen panicked: %v\n%s", r, firstFrames(debug.Stack()))
		}
	}()
	return fn()
}

// firstFrames keeps the frames just below the panic: where in oapi-codegen it happened, without
// burying the message under the whole stack.
func firstFrames(stack []byte) string {
	lines := strings.Split(strings.TrimSpace(string(stack)), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic(") {
			lines = lines[min(i+2, len(lines)):]
			break
		}
	}
	return strings.Join(lines[:min(8, len(lines))], "\n")
}

// relaxKeyHeaders makes each idempotent operation's key header optional in doc. oapi-codegen's
// binding answers a missing required header with its own 400 before our adapter runs; optional,
// the header reaches the runtime, which answers key-missing (or accepts absence when the policy
// says the key is optional).
//
// The parameter object is copied, never changed in place: a $ref'd component parameter or a
// path-item parameter may be shared with operations where it must stay required. A $ref keeps
// its Ref (so oapi-codegen names the type exactly as it would alone) with a private Value; a
// path-item parameter is overridden by an operation-level copy, which OpenAPI and oapi-codegen
// both let take precedence.
func relaxKeyHeaders(doc *openapi3.T, ops []*model.Operation) {
	if doc.Paths == nil {
		return
	}
	for _, op := range ops {
		if op.Policy == nil || op.Policy.Key.Header == "" {
			continue
		}
		item := doc.Paths.Value(op.Path)
		if item == nil {
			continue
		}
		o := item.GetOperation(op.Method)
		if o == nil {
			continue
		}
		relaxed := false
		for i, p := range o.Parameters {
			if isHeaderParam(p, op.Policy.Key.Header) {
				o.Parameters[i] = relaxedCopy(p)
				relaxed = true
			}
		}
		if relaxed {
			continue
		}
		for _, p := range item.Parameters {
			if isHeaderParam(p, op.Policy.Key.Header) {
				o.Parameters = append(o.Parameters, relaxedCopy(p))
			}
		}
	}
}

func isHeaderParam(p *openapi3.ParameterRef, name string) bool {
	return p != nil && p.Value != nil && p.Value.In == openapi3.ParameterInHeader && strings.EqualFold(p.Value.Name, name)
}

func relaxedCopy(p *openapi3.ParameterRef) *openapi3.ParameterRef {
	v := *p.Value
	v.Required = false
	return &openapi3.ParameterRef{Ref: p.Ref, Value: &v, Extensions: p.Extensions}
}

// oapiError turns an oapi-codegen failure into a message that names the spec and says what to
// try, keeping oapi-codegen's own words as the cause.
func oapiError(file string, err error) *Error {
	return &Error{File: file, Msg: "oapi-codegen cannot generate code for this document: " + err.Error() +
		"\n(x-idempotency is fine; oapi-codegen, which idemgen runs for models and server, rejects the document: fix the part it names, or set oapi-codegen options under the oapi-codegen key of idemgen.yaml)"}
}

// Error is a generation failure tied to a spec file, and to a place in it when Line is set.
type Error struct {
	File      string
	Line, Col int
	Operation string // "POST /v1/payments", or ""
	Msg       string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Operation != "" {
		b.WriteString(e.Operation + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

var errNoOperation = errors.New("operation missing from oapi-codegen's output")

// findParam returns oapi-codegen's view of the declared parameter (in, name); header names
// compare case-insensitively, as HTTP does.
func (o *oapiOp) findParam(in, name string) (oapiParam, bool) {
	i := slices.IndexFunc(o.Params, func(p oapiParam) bool {
		if p.In != in {
			return false
		}
		if in == openapi3.ParameterInHeader {
			return strings.EqualFold(p.Name, name)
		}
		return p.Name == name
	})
	if i < 0 {
		return oapiParam{}, false
	}
	return o.Params[i], true
}
