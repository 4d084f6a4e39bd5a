package generator

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/templates"
)

// ClientFile is the retry-safe client, written when Options.Client is set: IdempotentClient
// embeds oapi-codegen's ClientWithResponses, so every operation keeps oapi-codegen's method,
// and replaces the methods of the idempotent operations by ones that go through
// runtime/idemclient's attempt loop (one key per call, retries of what a retry can fix).
const ClientFile = "client.gen.go"

// clientPolicy is what the client needs of one idempotent operation's policy.
type clientPolicy struct {
	Route     string   // POST /v1/payments
	KeyHeader string   // as the spec declares it; "" for key.from: path:<param>
	Persist   []string // the outcomes the server stores
}

// clientPolicies reads the policies of the idempotent operations from the model, by route: the
// client's one view of x-idempotency, resolved by the same code as the server's.
func clientPolicies(doc *model.Document) map[string]clientPolicy {
	out := map[string]clientPolicy{}
	for _, op := range doc.Idempotent() {
		if op.Policy.Delivery != nil {
			continue // a webhook receiver is called by its sender, which signs and keys its deliveries
		}
		out[op.Route()] = clientPolicy{Route: op.Route(), KeyHeader: op.Policy.Key.Header, Persist: op.Policy.Persist}
	}
	return out
}

type clientData struct {
	Package    string
	ClientType string // oapi-codegen's client type: Client, unless output-options.client-type-name says otherwise
	// Imports are api.gen.go's, which the parameter types may name (openapi_types.UUID); the
	// ones the client does not use are pruned.
	Imports []string
	Ops     []clientOpData
}

type clientOpData struct {
	GoName    string
	Var       string // the idemclient.Operation variable
	Route     string // quoted
	RouteText string // for comments
	KeyHeader string // quoted
	Persist   string // quoted, comma-separated
	Variants  []clientVariant
}

// clientVariant is one of oapi-codegen's client methods of an operation: X, XWithBody or
// X<Media>Body, with its ClientWithResponses twin.
type clientVariant struct {
	Name   string
	Params string // the parameters, reqEditors excepted: "ctx context.Context, params *XParams, …"
	Args   string // the arguments that forward them: "ctx, params, …"
	// Kind is "reader" (contentType and an io.Reader body), "typed" (a typed body, encoded by
	// Builder once and sent through WithBody) or "none".
	Kind     string
	SendArgs string // reader and none: the raw call's arguments inside Send
	Builder  string // typed: oapi-codegen's request builder
	// BuilderArgs are the builder's arguments after the server, and WithBodyArgs those of the
	// WithBody method after ctx, with idemReq's content type and body.
	BuilderArgs, WithBodyArgs string
	Response                  string // the *T of its WithResponse twin
	Parse                     string // oapi-codegen's ParseT
}

// generateClient renders ClientFile from oapi-codegen's client (read from its source, so that
// every name and type is the one it emitted) and the idempotent operations' policies.
func generateClient(in Input, res *oapiResult, opts Options, oapiSrc []byte, declared ...map[string]bool) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: idemgen cannot generate %s (please report this): %s", in.File, ClientFile, fmt.Sprintf(format, args...))
	}
	api, err := readClientAPI(oapiSrc)
	if err != nil {
		return nil, fail("%v", err)
	}
	policies := clientPolicies(in.Model)
	data := &clientData{Package: opts.Package, ClientType: api.clientType, Imports: api.imports}
	for _, co := range res.Ops {
		pol, ok := policies[co.Route]
		if !ok || co.Alias {
			continue
		}
		od := clientOpData{GoName: co.GoName, Var: "idemOp" + co.GoName, Route: strconv.Quote(pol.Route), RouteText: pol.Route,
			KeyHeader: strconv.Quote(pol.KeyHeader), Persist: quoteList(pol.Persist)}
		names := api.variants(co.GoName, res.Ops)
		if len(names) == 0 {
			return nil, fail("%s: oapi-codegen generated no client method %s", co.Route, co.GoName)
		}
		for _, name := range names {
			v, err := api.variant(name, co.GoName)
			if err != nil {
				return nil, fail("%s: %v", co.Route, err)
			}
			od.Variants = append(od.Variants, v)
		}
		data.Ops = append(data.Ops, od)
	}
	t, err := template.New("").ParseFS(templates.FS, "client.go.tmpl")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "client.go.tmpl", data); err != nil {
		return nil, fmt.Errorf("%s: rendering %s: %w", in.File, ClientFile, err)
	}
	names := map[string]bool{}
	for _, d := range declared {
		for n := range d {
			names[n] = true
		}
	}
	src, _, _, err := formatSource(ClientFile, buf.Bytes(), names)
	if err != nil {
		return nil, fmt.Errorf("%s: idemgen produced invalid Go for %s (please report this): %w", in.File, ClientFile, err)
	}
	return src, nil
}

// clientAPI is oapi-codegen's client as its source declares it.
type clientAPI struct {
	fset       *token.FileSet
	clientType string
	imports    []string                 // the import specs, as written
	raw        map[string]*ast.FuncDecl // methods of the client type
	withResp   map[string]*ast.FuncDecl // methods of *ClientWithResponses
	funcs      map[string]*ast.FuncDecl // package-level functions
}

func readClientAPI(src []byte) (*clientAPI, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, OapiFile, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	a := &clientAPI{fset: fset, raw: map[string]*ast.FuncDecl{}, withResp: map[string]*ast.FuncDecl{}, funcs: map[string]*ast.FuncDecl{}}
	fixed := map[string]bool{`"context"`: true, `"errors"`: true, `"io"`: true, `"net/http"`: true} // the template's own
	for _, im := range f.Imports {
		if fixed[im.Path.Value] && im.Name == nil {
			continue
		}
		spec := im.Path.Value
		if im.Name != nil {
			spec = im.Name.Name + " " + spec
		}
		a.imports = append(a.imports, spec)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if fd.Recv == nil {
			a.funcs[fd.Name.Name] = fd
			continue
		}
		if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
			if id, ok := star.X.(*ast.Ident); ok {
				if id.Name == "ClientWithResponses" {
					a.withResp[fd.Name.Name] = fd
				} else {
					// Sorted out below, once the client type is known.
					a.raw[id.Name+"."+fd.Name.Name] = fd
				}
			}
		}
	}
	nc := a.funcs["NewClient"]
	if nc == nil || nc.Type.Results == nil || len(nc.Type.Results.List) == 0 {
		return nil, fmt.Errorf("oapi-codegen's output has no NewClient")
	}
	star, ok := nc.Type.Results.List[0].Type.(*ast.StarExpr)
	id, ok2 := star.X.(*ast.Ident)
	if !ok || !ok2 {
		return nil, fmt.Errorf("oapi-codegen's NewClient does not return a pointer to its client type")
	}
	a.clientType = id.Name
	raw := map[string]*ast.FuncDecl{}
	for k, fd := range a.raw {
		if typ, name, _ := strings.Cut(k, "."); typ == a.clientType {
			raw[name] = fd
		}
	}
	a.raw = raw
	return a, nil
}

// variants lists the client methods of operation goName, sorted: goName, goName + "WithBody"
// and goName + "With…Body", minus any that is another operation's own name.
func (a *clientAPI) variants(goName string, ops []*oapiOp) []string {
	others := map[string]bool{}
	for _, o := range ops {
		if o.GoName != goName {
			others[o.GoName], others[o.GoName+"WithBody"] = true, true
		}
	}
	var out []string
	for name := range a.raw {
		rest, ok := strings.CutPrefix(name, goName)
		if !ok || others[name] {
			continue
		}
		if rest == "" || rest == "WithBody" || (strings.HasPrefix(rest, "With") && strings.HasSuffix(rest, "Body")) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (a *clientAPI) variant(name, goName string) (clientVariant, error) {
	fd := a.raw[name]
	v := clientVariant{Name: name, Kind: "none"}
	type param struct{ name, typ string }
	var ps []param
	for _, f := range fd.Type.Params.List {
		var b strings.Builder
		if err := printer.Fprint(&b, a.fset, f.Type); err != nil {
			return v, err
		}
		for _, n := range f.Names {
			ps = append(ps, param{n.Name, b.String()})
		}
	}
	if len(ps) < 2 || ps[0].typ != "context.Context" || ps[len(ps)-1].typ != "...RequestEditorFn" {
		return v, fmt.Errorf("client method %s does not take (ctx, …, reqEditors ...RequestEditorFn)", name)
	}
	ps = ps[:len(ps)-1]
	var params, args, send, after []string
	for i, p := range ps {
		params = append(params, p.name+" "+p.typ)
		args = append(args, p.name)
		switch {
		case i == 0:
			send = append(send, "idemCtx")
		case p.name == "body" && p.typ == "io.Reader":
			v.Kind = "reader"
			send = append(send, "idemBody")
		case p.name == "body":
			v.Kind = "typed"
		default:
			send = append(send, p.name)
		}
		if i > 0 && p.name != "body" {
			after = append(after, p.name)
		}
	}
	v.Params, v.Args = strings.Join(params, ", "), strings.Join(args, ", ")
	v.SendArgs = strings.Join(append(send, "idemEdit"), ", ")
	if v.Kind == "typed" {
		suffix := strings.TrimPrefix(name, goName)
		v.Builder = "New" + goName + "Request" + suffix
		if _, ok := a.funcs[v.Builder]; !ok {
			return v, fmt.Errorf("oapi-codegen generated no request builder %s for %s", v.Builder, name)
		}
		if _, ok := a.raw[goName+"WithBody"]; !ok {
			return v, fmt.Errorf("oapi-codegen generated no %sWithBody for %s", goName, name)
		}
		v.BuilderArgs = strings.Join(append(after, "body"), ", ")
		v.WithBodyArgs = strings.Join(append(after, `idemReq.Header.Get("Content-Type")`, "idemReq.Body"), ", ")
	}
	wr := a.withResp[name+"WithResponse"]
	if wr == nil || wr.Type.Results == nil || len(wr.Type.Results.List) == 0 {
		return v, fmt.Errorf("oapi-codegen generated no %sWithResponse", name)
	}
	star, ok := wr.Type.Results.List[0].Type.(*ast.StarExpr)
	if !ok {
		return v, fmt.Errorf("%sWithResponse does not return a pointer", name)
	}
	id, ok := star.X.(*ast.Ident)
	if !ok {
		return v, fmt.Errorf("%sWithResponse does not return a pointer to a named type", name)
	}
	v.Response, v.Parse = id.Name, "Parse"+id.Name
	if _, ok := a.funcs[v.Parse]; !ok {
		return v, fmt.Errorf("oapi-codegen generated no %s", v.Parse)
	}
	return v, nil
}
