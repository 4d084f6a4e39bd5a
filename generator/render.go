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

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/templates"
)

// The template sees only these plain values: every name is resolved and every Go expression
// is pre-rendered here, so the template only prints.

type fileData struct {
	Package    string
	Ops        []opData
	Idempotent []opData
	// Helpers lists the generic helpers the adapter calls (idemKeyValues, …), so unused ones
	// are not emitted.
	Helpers map[string]bool
}

type opData struct {
	GoName     string // CreatePayment
	Route      string // POST /v1/payments
	Idempotent bool
	Storage    string // response, reference, marker
	Policy     policyData
	// Fingerprint parts after the route, in a fixed order: path, query, header, each by name.
	Fingerprint []partData
	Bodies      []bodyData
	Exclude     []string // quoted JSON pointers
	// NoFingerprint (fingerprint: false): Fingerprint and Bodies are empty and the fingerprint is
	// the route alone, so every request with the key matches.
	NoFingerprint bool
	Scope         []partData
	KeyExpr       string // Go expression of type []string
}

type partData struct {
	Name string // quoted Go string: "path:payment_id"
	Expr string // Go expression
}

type bodyData struct {
	Field string // Body, JSONBody, FormdataBody
}

type policyData struct {
	Operation      string // quoted
	Route          string // quoted
	Storage        string // idem.StorageResponse
	Claim          string // idem.ClaimModeLease
	TTL            string // 24 * time.Hour
	Lease          string
	Wait           string
	MismatchStatus int
	Persist        string // "2xx", "3xx"
	KeyHeader      string // quoted
	KeyRequired    bool
	KeyMaxLength   int
	KeyPattern     string // quoted, or ""
	ScopeTenant    bool
	ReplayHeaders  string // "Retry-After", "X-Rate" or ""
}

func render(w io.Writer, router string, data *fileData) error {
	t, err := template.New("").ParseFS(templates.FS, "idempotency.go.tmpl", router+"/*.tmpl")
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
	data := &fileData{Package: opts.Package, Helpers: map[string]bool{}}
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
		if !strings.Contains(res.Code, "type "+co.GoName+"RequestObject struct") {
			return nil, fmt.Errorf("%s: %s: oapi-codegen emitted no %sRequestObject; idemgen cannot wrap this operation (please report this)", s.File, co.Route, co.GoName)
		}
		od := opData{GoName: co.GoName, Route: co.Route}
		mo := byRoute[co.Route]
		if mo != nil && mo.Policy != nil {
			if err := fillIdempotent(&od, mo, co); err != nil {
				return nil, &Error{File: s.File, Line: mo.Policy.Pos.Line, Col: mo.Policy.Pos.Col, Operation: mo.Route(), Msg: err.Error()}
			}
			data.Idempotent = append(data.Idempotent, od)
			for _, h := range []string{"idemKeyValues", "idemKeyValue", "idemString"} {
				if strings.Contains(od.KeyExpr, h+"(") || slices.ContainsFunc(od.Scope, func(p partData) bool { return strings.Contains(p.Expr, h+"(") }) {
					data.Helpers[h] = true
				}
			}
		}
		data.Ops = append(data.Ops, od)
	}
	return data, nil
}

func fillIdempotent(od *opData, mo *model.Operation, co *oapiOp) error {
	p := mo.Policy
	od.Idempotent = true
	od.Storage = p.Storage
	id := mo.ID
	if id == "" {
		id = mo.Route()
	}
	pd := policyData{
		Operation:      strconv.Quote(id),
		Route:          strconv.Quote(mo.Route()),
		TTL:            durationLiteral(p.TTL),
		Lease:          durationLiteral(p.Lease),
		Wait:           durationLiteral(p.Wait),
		MismatchStatus: p.MismatchStatus,
		KeyRequired:    p.Key.Required,
		KeyMaxLength:   p.Key.MaxLength,
	}
	switch p.Storage {
	case model.StorageResponse:
		pd.Storage = "idem.StorageResponse"
	case model.StorageReference:
		pd.Storage = "idem.StorageReference"
	case model.StorageMarker:
		pd.Storage = "idem.StorageMarker"
	default:
		return fmt.Errorf("storage %q is not one idemgen generates (response, reference, marker)", p.Storage)
	}
	switch p.Claim {
	case model.ClaimLease, "":
		pd.Claim = "idem.ClaimModeLease"
	case model.ClaimTransaction:
		pd.Claim = "idem.ClaimModeTransaction"
	default:
		return fmt.Errorf("claim %q is not one idemgen generates (lease, transaction)", p.Claim)
	}
	pd.Persist = quoteList(p.Persist)
	pd.ReplayHeaders = quoteList(p.ReplayHeaders)
	if p.Key.Pattern != "" {
		pd.KeyPattern = goString(p.Key.Pattern)
	}

	// The key.
	switch {
	case p.Key.Header != "":
		kp, ok := co.findParam("header", p.Key.Header)
		if !ok {
			return fmt.Errorf("key header %q is not a header parameter of the operation (declare it under parameters)", p.Key.Header)
		}
		pd.KeyHeader = strconv.Quote(kp.Name)
		expr := "request.Params." + kp.GoName
		if kp.Pointer {
			od.KeyExpr = "idemKeyValues(" + expr + ")"
		} else {
			od.KeyExpr = "idemKeyValue(fmt.Sprint(" + expr + "))"
		}
	case p.Key.PathParam != "":
		kp, ok := co.findParam("path", p.Key.PathParam)
		if !ok {
			return fmt.Errorf("key path parameter %q is not a path parameter of the operation", p.Key.PathParam)
		}
		od.KeyExpr = "[]string{fmt.Sprint(request." + kp.GoName + ")}"
	default:
		return fmt.Errorf("the policy names no key source")
	}

	// The scope, in the policy's order; the tenant is the runtime's.
	for _, it := range p.Scope {
		switch it.Kind {
		case "tenant":
			pd.ScopeTenant = true
		case "operation":
			od.Scope = append(od.Scope, partData{Name: strconv.Quote("operation"), Expr: strconv.Quote(id)})
		case "header", "path":
			prm, ok := co.findParam(it.Kind, it.Name)
			if !ok {
				return fmt.Errorf("scope item %s:%s names no %s parameter of the operation", it.Kind, it.Name, it.Kind)
			}
			name := it.Name
			if it.Kind == "header" {
				name = http.CanonicalHeaderKey(name)
			}
			od.Scope = append(od.Scope, partData{Name: strconv.Quote(it.Kind + ":" + name), Expr: stringExpr(prm)})
		default:
			return fmt.Errorf("scope item kind %q is not one idemgen generates", it.Kind)
		}
	}

	od.Policy = pd
	if p.NoFingerprint {
		od.NoFingerprint = true
		return nil
	}
	// The fingerprint: declared path, query and non-key header parameters minus the excluded
	// ones, then the body.
	excluded := map[string]bool{}
	for _, x := range p.ExcludeParams {
		prm, ok := co.findParam(x.In, x.Name)
		if !ok {
			return fmt.Errorf("fingerprint.exclude %s:%s names no %s parameter of the operation", x.In, x.Name, x.In)
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
	for _, prm := range parts {
		od.Fingerprint = append(od.Fingerprint, partData{Name: strconv.Quote(partName(prm)), Expr: fieldExpr(prm)})
	}
	for _, b := range co.Bodies {
		if b.Kind == model.BodyJSON || b.Kind == model.BodyForm {
			od.Bodies = append(od.Bodies, bodyData{Field: b.Field})
		}
	}
	for _, e := range p.Exclude {
		od.Exclude = append(od.Exclude, strconv.Quote(e))
	}
	return nil
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

// stringExpr renders p's value as a string expression; an absent optional value is "".
func stringExpr(p oapiParam) string {
	if p.Pointer {
		return "idemString(" + fieldExpr(p) + ")"
	}
	return "fmt.Sprint(" + fieldExpr(p) + ")"
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
