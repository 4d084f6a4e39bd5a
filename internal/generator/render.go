package generator

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/templates"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// The template sees only these plain values: every name is resolved and every Go expression
// is pre-rendered here, so the template only prints.

type fileData struct {
	Package    string
	Ops        []opData
	Idempotent []opData
	// Answered are the operations whose response the adapter may write itself (idemResult): the
	// idempotent ones, and those whose body is validated.
	Answered []opData
	// ValidateBody: request bodies are checked against the embedded spec (Options.ValidateRequestBody).
	ValidateBody bool
	// ValidateOthers: some operation that is not idempotent has its body checked too.
	ValidateOthers bool
	Router         routerData
	// CustomRendered are the operations whose x-idempotency says renderer: custom (quoted ids):
	// the wiring refuses to start without a Renderer for them.
	CustomRendered string
}

// routerData is what a router's templates need besides their text: the route-registering
// methods to wrap (see [router]).
type routerData struct {
	Methods []string
}

type opData struct {
	GoName      string // CreatePayment
	OperationID string // quoted operationId as written ("createPayment"), or the route
	Route       string // POST /v1/payments
	Idempotent  bool
	Storage     string // response, reference, marker
	Policy      policyData
	KeyExpr     string     // the key's typed request field
	Scope       []partData // the scope's parts besides the tenant, in the policy's order
	Parts       []partData // the fingerprinted parameters
	// ValidateBody: the operation declares a body, checked against the spec before it runs.
	ValidateBody bool
	// Receiver is set for a webhook receiver (x-idempotency delivery): its key is the verified
	// delivery's id, not a request field (webhook.go).
	Receiver *receiverData
}

// partData is one named request value of the scope or the fingerprint.
type partData struct {
	Name  string // quoted: "header:X-Account"
	Value string // the typed request field; "" for the operation scope part
}

type policyData struct {
	Operation      string // quoted
	Route          string // quoted
	Storage        string // idemhttp.StorageResponse
	Claim          string // idem.ClaimLease
	TTL            string // 24 * time.Hour
	Lease          string
	Wait           string
	Timeout        string
	MismatchStatus int
	Persist        string // "2xx", "3xx"
	KeyHeader      string // quoted
	KeyRequired    bool
	KeyMaxLength   int
	KeyPattern     string // quoted, or ""
	ScopeTenant    bool
	// NoFingerprint (fingerprint: false): the op's Parts and Bodies are empty, so the
	// fingerprint is the route alone and every request with the key matches.
	NoFingerprint bool
	Exclude       string // quoted JSON pointers
	Body          bool   // the operation declares a request body, fingerprinted as sent
	BodyTypes     string // quoted declared media types of the body
	// DeclaredHeaders: quoted, the headers the spec declares on the stored responses
	// ([declaredHeaders]); ReplayHeaders: quoted, x-idempotency's replayHeaders.
	DeclaredHeaders string
	ReplayHeaders   string // "Retry-After", "X-Rate" or ""
	EchoHeaders     string // quoted, x-idempotency's echoHeaders
	// History and UncertainOnLoss are x-idempotency's history and uncertainOnLoss (History is
	// set whenever UncertainOnLoss is).
	History, UncertainOnLoss bool
	// Edge: the operation's retries of completed keys are answered before the router
	// (idemhttp.EdgeRule); EdgeScope and EdgeParts are quoted part names.
	Edge                 bool
	EdgeScope, EdgeParts string
}

func render(w io.Writer, r *Router, data *fileData) error {
	patterns := []string{"idempotency.go.tmpl", "partials/*.tmpl"}
	for _, folder := range r.templateFolders() {
		patterns = append(patterns, folder+"/*.tmpl")
	}
	t, err := template.New("").ParseFS(templates.FS, patterns...)
	if err != nil {
		return err
	}
	return t.ExecuteTemplate(w, "idempotency.go.tmpl", data)
}

// buildFileData joins the model (policies) with oapi-codegen's names (types and fields).
func buildFileData(s Input, res *oapiResult, opts Options) (*fileData, error) {
	byRoute := map[string]*model.Operation{}
	for _, op := range s.Model.Operations {
		byRoute[op.Route()] = op
	}
	data := &fileData{Package: opts.Package, ValidateBody: opts.ValidateRequestBody, Router: routerData{Methods: opts.Router.methods}}
	var custom []string
	served := map[string]bool{}
	for _, co := range res.Ops {
		served[co.Route] = true
	}
	for _, mo := range s.Model.Operations {
		if mo.Policy != nil && !served[mo.Route()] {
			return nil, &Error{File: s.File, Line: mo.Policy.Pos.Line, Col: mo.Policy.Pos.Col, Operation: mo.Route(),
				Msg: "oapi-codegen generates no server method for this operation, so its x-idempotency cannot be applied (remove it, or report this)"}
		}
	}
	for _, co := range res.Ops {
		if co.Alias {
			continue
		}
		od := opData{GoName: co.GoName, Route: co.Route, ValidateBody: opts.ValidateRequestBody && len(co.Bodies) > 0}
		od.OperationID = strconv.Quote(co.Route)
		if mo := byRoute[co.Route]; mo != nil {
			od.OperationID = strconv.Quote(operationID(mo))
		}
		if mo := byRoute[co.Route]; mo != nil && mo.Policy != nil {
			if mo.Policy.Renderer == policy.RendererCustom {
				custom = append(custom, operationID(mo))
			}
			if err := fillIdempotent(&od, mo, co); err != nil {
				return nil, &Error{File: s.File, Line: mo.Policy.Pos.Line, Col: mo.Policy.Pos.Col, Operation: mo.Route(), Msg: err.Error()}
			}
			data.Idempotent = append(data.Idempotent, od)
		}
		if od.Idempotent || od.ValidateBody {
			data.Answered = append(data.Answered, od)
		}
		data.ValidateOthers = data.ValidateOthers || (od.ValidateBody && !od.Idempotent)
		data.Ops = append(data.Ops, od)
	}
	data.CustomRendered = quoteList(custom)
	return data, nil
}

// fillIdempotent resolves one idempotent operation: its policy literal, its key, its scope and
// its fingerprint, each decided by its own function.
func fillIdempotent(od *opData, mo *model.Operation, co *oapiOp) error {
	p := mo.Policy
	od.Idempotent = true
	od.Storage = string(p.Storage)
	pd, err := policyLiteral(mo)
	if err != nil {
		return err
	}
	pd.BodyTypes = quoteList(mo.BodyTypes)
	pd.DeclaredHeaders = quoteList(declaredHeaders(mo))
	if od.Receiver, err = receiverLiteral(p); err != nil {
		return err
	}
	keyHeader, keyExpr := strconv.Quote(p.Key.Header), `""`
	if od.Receiver == nil {
		if keyHeader, keyExpr, err = keySource(p, co); err != nil {
			return err
		}
	}
	pd.KeyHeader, od.KeyExpr = keyHeader, keyExpr
	if od.Scope, err = scopeParts(p, co); err != nil {
		return err
	}
	pd.ScopeTenant = p.ScopesTenant()
	if p.NoFingerprint {
		pd.NoFingerprint = true
		od.Policy = pd
		return nil
	}
	if od.Parts, err = fingerprintParts(p, co); err != nil {
		return err
	}
	if pd.Body = len(co.Bodies) > 0; pd.Body {
		pd.Exclude = quoteList(p.Exclude)
	}
	edgeRule(&pd, p, co, od.Receiver != nil)
	od.Policy = pd
	return nil
}

// edgeRule decides whether the operation's retries of completed keys can be answered before the
// router (idemhttp.EdgeRule): it stores whole responses, is no webhook receiver, its key is a
// string header, and every scope and fingerprint part is a string header or path parameter, which
// the binding keeps as the request sends it. The parts are named as Op.Scope and Op.Parts name
// them, in the same order.
func edgeRule(pd *policyData, p *policy.Policy, co *oapiOp, receiver bool) {
	if p.Storage != policy.StorageResponse || receiver || p.Key.Header == "" {
		return
	}
	if kp, ok := co.findParam("header", p.Key.Header); !ok || !kp.Plain {
		return
	}
	plain := func(prm oapiParam) bool {
		return prm.Plain && (prm.In == "header" || prm.In == "path")
	}
	var scope, parts []string
	for _, it := range p.Scope {
		switch it.Kind {
		case policy.ScopeTenant:
		case policy.ScopeOperation:
			scope = append(scope, policy.ScopeOperation)
		default:
			prm, ok := co.findParam(it.Kind, it.Name)
			if !ok || !plain(prm) {
				return
			}
			scope = append(scope, partName(prm))
		}
	}
	if !p.NoFingerprint {
		prms, err := fingerprintParams(p, co)
		if err != nil {
			return
		}
		for _, prm := range prms {
			if !plain(prm) {
				return
			}
			parts = append(parts, partName(prm))
		}
	}
	pd.Edge, pd.EdgeScope, pd.EdgeParts = true, quoteList(scope), quoteList(parts)
}

// policyLiteral renders the policy's plain values: names, modes, durations and statuses.
func policyLiteral(mo *model.Operation) (policyData, error) {
	p := mo.Policy
	pd := policyData{
		Operation:       strconv.Quote(operationID(mo)),
		Route:           strconv.Quote(mo.Route()),
		TTL:             durationLiteral(p.TTL),
		Lease:           durationLiteral(p.Lease),
		Wait:            durationLiteral(p.Wait),
		Timeout:         durationLiteral(p.Timeout),
		MismatchStatus:  p.MismatchStatus,
		KeyRequired:     p.Key.Required,
		KeyMaxLength:    p.Key.MaxLength,
		Persist:         quoteList(p.Persist),
		ReplayHeaders:   quoteList(p.ReplayHeaders),
		EchoHeaders:     quoteList(p.EchoHeaders),
		History:         p.History || p.UncertainOnLoss,
		UncertainOnLoss: p.UncertainOnLoss,
	}
	switch p.Storage {
	case policy.StorageResponse:
		pd.Storage = "idemhttp.StorageResponse"
	case policy.StorageReference:
		pd.Storage = "idemhttp.StorageReference"
	case policy.StorageMarker:
		pd.Storage = "idemhttp.StorageMarker"
	default:
		return pd, fmt.Errorf("storage %q is not one idemgen generates (response, reference, marker)", p.Storage)
	}
	switch p.Claim {
	case policy.ClaimLease, "":
		pd.Claim = "idem.ClaimLease"
	case policy.ClaimTransaction:
		pd.Claim = "idem.ClaimTransaction"
	default:
		return pd, fmt.Errorf("claim %q is not one idemgen generates (lease, transaction)", p.Claim)
	}
	if p.Key.Pattern != "" {
		pd.KeyPattern = goString(p.Key.Pattern)
	}
	return pd, nil
}

// declaredHeaders are the headers mo's responses declare (responses.<status>.headers) on the
// statuses its policy stores, as written, each once, in the order of the canonical names: a
// replay carries them as the first answer did, so no list has to repeat the spec. A response
// keyed by a range (2XX) counts when the policy stores any status of it, and default always
// counts, since it stands for statuses no other response names. Those no replay may carry
// (idemhttp.NeverReplayed: Set-Cookie, Authorization, hop-by-hop headers) are left out.
func declaredHeaders(mo *model.Operation) []string {
	var out []string
	for _, h := range mo.ResponseHeaders {
		if !mo.Policy.StoresStatus(h.Status) || idemhttp.NeverReplayed(h.Name) ||
			slices.ContainsFunc(out, func(s string) bool { return strings.EqualFold(s, h.Name) }) {
			continue
		}
		out = append(out, h.Name)
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Compare(http.CanonicalHeaderKey(a), http.CanonicalHeaderKey(b))
	})
	return out
}

// operationID is the operation's id as written, or its route when it has none.
func operationID(mo *model.Operation) string {
	if mo.ID == "" {
		return mo.Route()
	}
	return mo.ID
}

// keySource finds the key's parameter: the key header's declared name (quoted; "" for a path
// key) and the typed request field that holds the key.
func keySource(p *policy.Policy, co *oapiOp) (header, expr string, err error) {
	switch {
	case p.Key.Header != "":
		kp, ok := co.findParam("header", p.Key.Header)
		if !ok {
			return "", "", fmt.Errorf("key header %q is not a header parameter of the operation (declare it under parameters)", p.Key.Header)
		}
		return strconv.Quote(kp.Name), fieldExpr(kp), nil
	case p.Key.PathParam != "":
		kp, ok := co.findParam("path", p.Key.PathParam)
		if !ok {
			return "", "", fmt.Errorf("key path parameter %q is not a path parameter of the operation", p.Key.PathParam)
		}
		return "", fieldExpr(kp), nil
	}
	return "", "", fmt.Errorf("the policy names no key source")
}

// scopeParts lists the scope's parts besides the tenant, in the policy's order: their names
// and, for header: and path: parts, the typed request fields that hold their values.
func scopeParts(p *policy.Policy, co *oapiOp) ([]partData, error) {
	var parts []partData
	for _, it := range p.Scope {
		switch it.Kind {
		case policy.ScopeTenant:
		case policy.ScopeOperation:
			parts = append(parts, partData{Name: strconv.Quote(policy.ScopeOperation)})
		case policy.ScopeHeader, policy.ScopePath:
			prm, ok := co.findParam(it.Kind, it.Name)
			if !ok {
				return nil, fmt.Errorf("scope item %s names no %s parameter of the operation", it, it.Kind)
			}
			parts = append(parts, partData{Name: strconv.Quote(partName(prm)), Value: fieldExpr(prm)})
		default:
			return nil, fmt.Errorf("scope item kind %q is not one idemgen generates", it.Kind)
		}
	}
	return parts, nil
}

// fingerprintParts lists the declared path, query and non-key header parameters that are
// fingerprinted (minus fingerprint.exclude's and the headers the default fingerprint leaves out,
// policy.Unprinted), in a fixed order: path, query, header, each by name.
func fingerprintParts(p *policy.Policy, co *oapiOp) ([]partData, error) {
	parts, err := fingerprintParams(p, co)
	if err != nil {
		return nil, err
	}
	out := make([]partData, len(parts))
	for i, prm := range parts {
		out[i] = partData{Name: strconv.Quote(partName(prm)), Value: fieldExpr(prm)}
	}
	return out, nil
}

// fingerprintParams are the parameters fingerprintParts names, in its order.
func fingerprintParams(p *policy.Policy, co *oapiOp) ([]oapiParam, error) {
	excluded := map[string]bool{}
	for _, u := range p.Unprinted {
		if prm, ok := co.findParam("header", u.Name); ok {
			excluded[partName(prm)] = true
		}
	}
	for _, x := range p.ExcludeParams {
		prm, ok := co.findParam(x.In, x.Name)
		if !ok {
			return nil, fmt.Errorf("fingerprint.exclude %s:%s names no %s parameter of the operation", x.In, x.Name, x.In)
		}
		excluded[partName(prm)] = true
	}
	var parts []oapiParam
	for _, prm := range co.Params {
		if excluded[partName(prm)] {
			continue
		}
		switch prm.In {
		case "path", "query":
			parts = append(parts, prm)
		case "header":
			if p.Key.Header == "" || !strings.EqualFold(prm.Name, p.Key.Header) {
				parts = append(parts, prm)
			}
		}
	}
	order := map[string]int{"path": 0, "query": 1, "header": 2}
	slices.SortStableFunc(parts, func(a, b oapiParam) int {
		return cmp.Or(cmp.Compare(order[a.In], order[b.In]), cmp.Compare(partName(a), partName(b)))
	})
	return parts, nil
}

func partName(p oapiParam) string {
	if p.In == "header" {
		return "header:" + http.CanonicalHeaderKey(p.Name)
	}
	return p.In + ":" + p.Name
}

// fieldExpr is the typed request's field for p.
func fieldExpr(p oapiParam) string {
	if p.In == "path" {
		return "request." + p.GoName
	}
	return "request.Params." + p.GoName
}

// goString quotes s for Go source, as a raw string when that keeps a regular expression
// readable.
func goString(s string) string {
	if strconv.CanBackquote(s) {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// durationLiteral writes d the way a person would: 24 * time.Hour, 90 * time.Second.
func durationLiteral(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	units := []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "time.Hour"},
		{time.Minute, "time.Minute"},
		{time.Second, "time.Second"},
		{time.Millisecond, "time.Millisecond"},
	}
	for _, u := range units {
		if d%u.d == 0 {
			n := int64(d / u.d)
			if n == 1 {
				return u.name
			}
			return strconv.FormatInt(n, 10) + " * " + u.name
		}
	}
	return "time.Duration(" + strconv.FormatInt(int64(d), 10) + ")"
}
