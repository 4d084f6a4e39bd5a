package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Field is one x-idempotency field as written: Set is false when the field is absent or invalid
// (an invalid field has been reported already and falls back to the default, so one mistake gives
// one diagnostic, not a cascade). Pos is the value's place, for messages.
type Field[T any] struct {
	Set bool
	V   T
	Pos Position
}

// Value returns a set field.
func Value[T any](v T, pos Position) Field[T] { return Field[T]{Set: true, V: v, Pos: pos} }

// Placed is a list item with its place in the spec.
type Placed[T any] struct {
	V   T
	Pos Position
}

// RawKey is x-idempotency.key as written.
type RawKey struct {
	Header    Field[string]
	From      Field[string] // the path parameter's name
	Required  Field[bool]
	MaxLength Field[int]
	Pattern   Field[string]
}

// Raw is an x-idempotency mapping as written, every field checked on its own by the Parse
// functions. What needs the operation or the merged policy is checked by [Resolve].
type Raw struct {
	Storage          Field[StorageMode]
	Claim            Field[ClaimMode]
	TTL, Lease, Wait Field[time.Duration]
	Timeout          Field[time.Duration]
	MismatchStatus   Field[int]
	Persist          Field[[]string]
	Scope            Field[[]Placed[ScopeItem]]
	Key              RawKey
	Fingerprint      Field[bool]
	Exclude          Field[[]Placed[ExcludeItem]]
	Include          Field[[]Placed[ExcludeItem]] // header:<Name> items only
	ReplayHeaders    Field[[]string]
	EchoHeaders      Field[[]string]
	Renderer         Field[string]
	History          Field[bool]
	UncertainOnLoss  Field[bool]
	Delivery         Field[RawDelivery] // a webhook receiver's (webhook.go)
}

// Input is one policy to resolve.
type Input struct {
	Raw      *Raw // the operation's x-idempotency; an empty Raw for x-idempotency: true
	Defaults *Raw // the document's root x-idempotency; nil when absent or invalid
	// Op is the operation. Without one (nil), only the merge and the checks that need no
	// operation run: the key keeps the header as written, parameters are not looked up.
	Op  *Operation
	Pos Position // where x-idempotency is written: the place of every value left to a default
}

// Diagnostic is one finding, with its place in the file.
type Diagnostic struct {
	Pos       Position
	Severity  Severity
	Rule      string // stable rule id, e.g. "ttl-invalid"
	Operation string // "POST /v1/payments", or "" for document-level findings
	// Field is the x-idempotency field the finding is about ("wait", "key.header"), or "" when
	// it is about none; Message starts with x-idempotency.<Field>: then.
	Field   string
	Message string // says what is wrong and what to do, without position or operation
}

// String renders "file:line:col: POST /v1/payments: message". Warnings carry "warning: " after
// the position so that a reader of mixed output can tell them from errors; errors carry nothing
// extra, as in every compiler's output.
func (d Diagnostic) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", d.Pos.File, d.Pos.Line, d.Pos.Col)
	if d.Severity == SeverityWarning {
		b.WriteString("warning: ")
	}
	if d.Operation != "" {
		b.WriteString(d.Operation)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	return b.String()
}

// Detail is Message without its "x-idempotency.<Field>: " prefix, for a caller that names the
// field its own way.
func (d Diagnostic) Detail() string {
	return strings.TrimPrefix(d.Message, "x-idempotency."+d.Field+": ")
}

// NewDiagnostic is a finding of rule at pos, with the rule's severity.
func NewDiagnostic(pos Position, rule, op, msg string) Diagnostic {
	return Diagnostic{Pos: pos, Severity: RuleSeverity(rule), Rule: rule, Operation: op, Message: msg}
}

type resolver struct {
	in    Input
	route string
	diags []Diagnostic
}

func (r *resolver) errorf(pos Position, rule, field, format string, args ...any) {
	d := NewDiagnostic(pos, rule, r.route, fmt.Sprintf("x-idempotency."+field+": "+format, args...))
	d.Field = field
	r.diags = append(r.diags, d)
}

// pick returns the operation's setting, else the document default, else def; fromDefs tells
// messages that the value was inherited.
func pick[T any](op, defs Field[T], def T, anchor Position) (v T, pos Position, fromDefs bool) {
	switch {
	case op.Set:
		return op.V, op.Pos, false
	case defs.Set:
		return defs.V, defs.Pos, true
	}
	return def, anchor, false
}

const inherited = "; it comes from the document-level x-idempotency"

func note(fromDefs bool) string {
	if fromDefs {
		return inherited
	}
	return ""
}

// Resolve merges an operation's x-idempotency over the document defaults and the built-in
// ones, and checks every rule that needs the operation or the merged policy. A field set on the
// operation replaces the default whole (lists are not concatenated); within key, header and from
// are one choice, and required, maxLength and pattern are inherited one by one. The policy is
// complete even when a diagnostic is an error: an invalid value falls back to its default.
func Resolve(in Input) (*Policy, []Diagnostic) {
	raw, defs := in.Raw, in.Defaults
	if raw == nil {
		raw = &Raw{}
	}
	if defs == nil {
		defs = &Raw{}
	}
	r := &resolver{in: in}
	if in.Op != nil {
		r.route = in.Op.Route()
	}
	at := in.Pos
	p := &Policy{Pos: at}

	var storagePos, ttlPos, waitPos Position
	var storageDefs, ttlDefs, waitDefs bool
	p.Storage, storagePos, storageDefs = pick(raw.Storage, defs.Storage, DefaultStorage, at)
	p.TTL, ttlPos, ttlDefs = pick(raw.TTL, defs.TTL, DefaultTTL, at)
	p.Lease, _, _ = pick(raw.Lease, defs.Lease, DefaultLease, at)
	p.Wait, waitPos, waitDefs = pick(raw.Wait, defs.Wait, DefaultWait, at)
	// No request may wait forever: the handler's time is bounded, by default by the lease.
	p.Timeout, _, _ = pick(raw.Timeout, defs.Timeout, p.Lease, at)
	p.Claim, _, _ = pick(raw.Claim, defs.Claim, DefaultClaim, at)
	p.MismatchStatus, _, _ = pick(raw.MismatchStatus, defs.MismatchStatus, DefaultMismatchStatus, at)
	p.Persist, _, _ = pick(raw.Persist, defs.Persist, DefaultPersist(), at)
	p.Persist = append([]string(nil), p.Persist...)
	fingerprint, printPos, printDefs := pick(raw.Fingerprint, defs.Fingerprint, true, at)
	p.NoFingerprint = !fingerprint
	exclude, _, excludeDefs := pick(raw.Exclude, defs.Exclude, nil, at)
	p.ReplayHeaders, _, _ = pick(raw.ReplayHeaders, defs.ReplayHeaders, nil, at)
	p.EchoHeaders, _, _ = pick(raw.EchoHeaders, defs.EchoHeaders, nil, at)
	p.Renderer, _, _ = pick(raw.Renderer, defs.Renderer, RendererProblem, at)
	p.History, _, _ = pick(raw.History, defs.History, false, at)
	var uncertainPos Position
	var uncertainDefs bool
	p.UncertainOnLoss, uncertainPos, uncertainDefs = pick(raw.UncertainOnLoss, defs.UncertainOnLoss, false, at)
	// uncertainOnLoss implies history: the provider call it turns uncertain is recorded there.
	p.History = p.History || p.UncertainOnLoss
	include, _, includeDefs := pick(raw.Include, defs.Include, nil, at)

	var defScope []Placed[ScopeItem]
	for _, it := range DefaultScope() {
		defScope = append(defScope, Placed[ScopeItem]{V: it, Pos: at})
	}
	scope, _, scopeDefs := pick(raw.Scope, defs.Scope, defScope, at)
	r.scope(p, scope, scopeDefs)
	if raw.Delivery.Set {
		r.delivery(p, raw, in.Defaults)
	} else {
		r.key(p, raw.Key, defs.Key)
	}
	if !p.NoFingerprint {
		// With the fingerprint off there is nothing to exclude from, so exclusions inherited from
		// the document defaults are neither applied nor checked against this operation.
		r.exclude(p, exclude, excludeDefs)
		r.include(p, include, includeDefs)
		r.unprinted(p)
	}

	if p.Wait > p.Lease {
		r.errorf(waitPos, RuleWaitExceedsLease, "wait", "%s is longer than the lease (%s): a duplicate would still be waiting when the first request's claim can be taken over (use a wait shorter than the lease)%s", FormatDuration(p.Wait), FormatDuration(p.Lease), note(waitDefs))
	}
	if p.TTL < p.Lease {
		r.errorf(ttlPos, RuleTTLShorterThanLease, "ttl", "%s is shorter than the lease (%s): a completed key is forgotten before a retry of a slow request arrives, and the retry runs again (use a ttl of at least the lease)%s", FormatDuration(p.TTL), FormatDuration(p.Lease), note(ttlDefs))
	}
	if p.UncertainOnLoss && p.Claim == ClaimTransaction {
		r.errorf(uncertainPos, RuleUncertainNeedsLease, "uncertainOnLoss", "needs claim: lease, and the claim is transaction: a transaction's claim is not durable until it commits, so a crash after the provider call leaves no row and no history saying the provider was called, and the retry calls it again%s (use claim: lease, or remove uncertainOnLoss)", note(uncertainDefs))
	}
	if p.Storage == StorageMarker && p.NoFingerprint {
		r.errorf(printPos, RuleMarkerNeedsPrint, "fingerprint", "storage marker keeps only the status and the fingerprint, so the fingerprint cannot be off%s (remove fingerprint: false, or use storage: response)", note(printDefs))
	}
	if op := in.Op; op != nil {
		switch {
		case p.Storage == StorageReference && !op.Responses.SuccessBody:
			r.errorf(storagePos, RuleReplayImpossible, "storage", "reference replays by reloading the resource into a 2xx response with a body, and the operation declares none%s (declare one, or use storage: response)", note(storageDefs))
		case p.Storage == StorageMarker && !op.Responses.AnySuccess:
			r.errorf(storagePos, RuleReplayImpossible, "storage", "marker replays by recomputing a 2xx response, and the operation declares none%s (declare one, or use storage: response)", note(storageDefs))
		case p.Storage == StorageResponse && op.Responses.Unbounded != "":
			r.errorf(storagePos, RuleResponseUnbounded, "storage", "response stores the 2xx body whole, and %s has no size bound: a body over the store's limit (idem.Config.MaxStoredBody, 1 MiB by default) is answered but stored without it, and replays come back empty (bound it with maxItems/maxLength, raise the limit, or use storage: reference)%s", op.Responses.Unbounded, note(storageDefs))
		}
		if SafeMethod(op.Method) {
			d := NewDiagnostic(at, RuleSafeMethod, r.route, fmt.Sprintf("x-idempotency on %s: the method is safe, so retries are already harmless and the key store only adds a write (remove x-idempotency)", op.Method))
			r.diags = append(r.diags, d)
		}
	}
	return p, r.diags
}

// SafeMethod reports the methods whose retries are already harmless.
func SafeMethod(m string) bool { return m == "GET" || m == "HEAD" || m == "OPTIONS" }

func (r *resolver) scope(p *Policy, scope []Placed[ScopeItem], fromDefs bool) {
	op := r.in.Op
	p.Scope = []ScopeItem{}
	for _, placed := range scope {
		it := placed.V
		switch {
		case op == nil || (it.Kind != ScopeHeader && it.Kind != ScopePath):
			p.Scope = append(p.Scope, it)
		case it.Kind == ScopeHeader:
			prm, ok := FindParam(op.Params, "header", it.Name)
			if !ok {
				r.errorf(placed.Pos, RuleScopeParamMissing, "scope", "header:%s is not a header parameter of the operation or its path item%s (declare it under parameters, or remove it from scope)", it.Name, note(fromDefs))
				continue
			}
			p.Scope = append(p.Scope, ScopeItem{Kind: it.Kind, Name: prm.Name})
		default:
			if _, ok := FindParam(op.Params, "path", it.Name); !ok {
				r.errorf(placed.Pos, RuleScopeParamMissing, "scope", "path:%s is not a path parameter of %s%s (%s)", it.Name, op.Path, note(fromDefs), pathParamHint(op.Params))
				continue
			}
			p.Scope = append(p.Scope, it)
		}
	}
}

// exclude splits fingerprint.exclude into body pointers and parameters, and checks that each
// parameter is declared and may be left out. A path parameter may not: it names the resource,
// and a retry of the key against another resource would be replayed this one's outcome. The key
// header is never fingerprinted, so excluding it would suggest a protection that is not there.
func (r *resolver) exclude(p *Policy, items []Placed[ExcludeItem], fromDefs bool) {
	const field = "fingerprint.exclude"
	op := r.in.Op
	for _, placed := range items {
		it, pos := placed.V, placed.Pos
		switch it.Kind {
		case ExcludeBody:
			p.Exclude = append(p.Exclude, it.Name)
		case ExcludePath:
			r.errorf(pos, RuleFingerprintParamDenied, field, "path:%s cannot be excluded: a path parameter names the resource, and a retry against another resource would be answered with this one's outcome%s (remove it)", it.Name, note(fromDefs))
		case ExcludeHeader:
			if p.Key.Header != "" && strings.EqualFold(it.Name, p.Key.Header) {
				r.errorf(pos, RuleFingerprintParamDenied, field, "header:%s is the idempotency key, which is never part of the fingerprint%s (remove it)", it.Name, note(fromDefs))
				continue
			}
			name := it.Name
			if op != nil {
				prm, ok := FindParam(op.Params, "header", it.Name)
				if !ok {
					r.errorf(pos, RuleFingerprintParamMissing, field, "header:%s is not a header parameter of the operation or its path item, and only declared headers are fingerprinted%s (declare it under parameters, or remove it from exclude)", it.Name, note(fromDefs))
					continue
				}
				name = prm.Name
			}
			p.ExcludeParams = append(p.ExcludeParams, ParamRef{In: "header", Name: name})
		case ExcludeQuery:
			if op != nil {
				if _, ok := FindParam(op.Params, "query", it.Name); !ok {
					r.errorf(pos, RuleFingerprintParamMissing, field, "query:%s is not a query parameter of the operation or its path item%s (%s)", it.Name, note(fromDefs), queryParamHint(op.Params))
					continue
				}
			}
			p.ExcludeParams = append(p.ExcludeParams, ParamRef{In: "query", Name: it.Name})
		}
	}
}

// queryParamHint lists the query parameters an exclusion could have meant; names are exact.
func queryParamHint(ps []Param) string {
	var names []string
	for _, p := range ps {
		if p.In == "query" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "it declares no query parameters; remove it from exclude"
	}
	return "names are case-sensitive; use one of: " + strings.Join(names, ", ")
}

func (r *resolver) key(p *Policy, op, defs RawKey) {
	at, o := r.in.Pos, r.in.Op
	// header and from are one choice: the operation's, else the defaults', else the built-in header.
	src, srcDefs := op, false
	if !op.Header.Set && !op.From.Set {
		src, srcDefs = defs, true
	}
	switch {
	case src.From.Set:
		if o != nil {
			if _, ok := FindParam(o.Params, "path", src.From.V); !ok {
				r.errorf(src.From.Pos, RuleKeyParamMissing, "key.from", "path:%s is not a path parameter of %s%s (%s)", src.From.V, o.Path, note(srcDefs), pathParamHint(o.Params))
			}
		}
		p.Key.PathParam = src.From.V
	default:
		name, pos, fromDefs := DefaultKeyHeader, at, false
		if src.Header.Set {
			name, pos, fromDefs = src.Header.V, src.Header.Pos, srcDefs
		}
		if o != nil {
			if prm, ok := FindParam(o.Params, "header", name); ok {
				name = prm.Name
			} else if alt := keyLikeHeader(o.Params); alt != "" {
				r.errorf(pos, RuleKeyHeaderUndeclared, "key.header", "%s is not declared as a header parameter of the operation or its path item, but %s is (set key: {header: %s}, or declare %s)%s", name, alt, alt, name, note(fromDefs))
			} else {
				r.errorf(pos, RuleKeyHeaderUndeclared, "key.header", "%s is not declared as a header parameter of the operation or its path item%s (add {name: %s, in: header, schema: {type: string}} under parameters; idemgen annotate does it)", name, note(fromDefs), name)
			}
		}
		p.Key.Header = name
	}
	p.Key.Required, _, _ = pick(op.Required, defs.Required, true, at)
	if p.Key.PathParam != "" {
		p.Key.Required = true
	}
	maxLen, maxPos, maxDefs := pick(op.MaxLength, defs.MaxLength, 0, at)
	pattern, patPos, patDefs := pick(op.Pattern, defs.Pattern, "", at)
	p.Key.MaxLength, p.Key.Pattern = maxLen, pattern
	if p.Key.Header != "" && o != nil {
		if prm, ok := FindParam(o.Params, "header", p.Key.Header); ok {
			r.keyParamRules(p, prm, maxLen, maxPos, maxDefs, pattern, patPos, patDefs)
		}
	}
	if p.Key.MaxLength == 0 {
		p.Key.MaxLength = MaxKeyLength
	}
}

// keyParamRules takes the key header parameter's own rules, its schema's maxLength and pattern,
// into the policy: a key the spec forbids must not be accepted. x-idempotency.key may repeat
// them; where it says otherwise, the two disagree and that is an error, since a client reading
// the parameter and the server would each hold a different rule. A parameter's pattern that is
// not RE2 (Go's regexp: no look-ahead, no back-references) cannot be enforced as written, so it
// is an error unless key.pattern gives the RE2 form the server enforces instead.
func (r *resolver) keyParamRules(p *Policy, prm Param, maxLen int, maxPos Position, maxDefs bool, pattern string, patPos Position, patDefs bool) {
	if prm.MaxLength > 0 {
		switch {
		case maxLen == 0:
			p.Key.MaxLength = min(prm.MaxLength, MaxKeyLength)
		case maxLen != prm.MaxLength:
			r.errorf(maxPos, RuleKeyParamMismatch, "key.maxLength", "%d, but the %s parameter declares maxLength %d (%s:%d:%d)%s: the server and the spec would accept different keys (remove key.maxLength to take the parameter's, or make them equal)",
				maxLen, prm.Name, prm.MaxLength, prm.MaxLengthPos.File, prm.MaxLengthPos.Line, prm.MaxLengthPos.Col, note(maxDefs))
		}
	}
	if prm.Pattern == "" {
		return
	}
	_, bad := ParseKeyPattern(prm.Pattern)
	switch {
	case pattern == "" && bad != nil:
		fix := "rewrite it in RE2, or set x-idempotency.key.pattern to the RE2 pattern the server is to enforce"
		if re2, ok := RE2Form(prm.Pattern); ok {
			fix = fmt.Sprintf("set x-idempotency.key.pattern to the same keys written in RE2, at the document's root for every operation: x-idempotency: {key: {pattern: '%s'}}", strings.ReplaceAll(re2, "'", "''"))
		}
		d := NewDiagnostic(prm.PatternPos, RuleKeyPatternInvalid, r.route, fmt.Sprintf(
			"the key header %s's schema pattern %q is not RE2, the syntax Go's regexp (and so the server) enforces: %s (%s)",
			prm.Name, prm.Pattern, strings.TrimPrefix(bad.Msg, fmt.Sprintf("%q is not a valid RE2 regular expression: ", prm.Pattern)), fix))
		r.diags = append(r.diags, d)
	case pattern == "":
		p.Key.Pattern = prm.Pattern
	case pattern != prm.Pattern && bad == nil:
		r.errorf(patPos, RuleKeyParamMismatch, "key.pattern", "%q, but the %s parameter declares pattern %q (%s:%d:%d)%s: the server and the spec would accept different keys (remove key.pattern to take the parameter's, or make them equal)",
			pattern, prm.Name, prm.Pattern, prm.PatternPos.File, prm.PatternPos.Line, prm.PatternPos.Col, note(patDefs))
	}
}

// include checks fingerprint.include: declared headers, fingerprinted although the default
// leaves them out. Putting a credential, signature or correlation header back is allowed, and
// warned about: an honest retry that refreshes it is then answered key-reused.
func (r *resolver) include(p *Policy, items []Placed[ExcludeItem], fromDefs bool) {
	const field = "fingerprint.include"
	op := r.in.Op
	for _, placed := range items {
		it, pos := placed.V, placed.Pos
		if p.Key.Header != "" && strings.EqualFold(it.Name, p.Key.Header) {
			r.errorf(pos, RuleFingerprintParamDenied, field, "header:%s is the idempotency key, which is never part of the fingerprint%s (remove it)", it.Name, note(fromDefs))
			continue
		}
		name := it.Name
		if op != nil {
			prm, ok := FindParam(op.Params, "header", it.Name)
			if !ok {
				r.errorf(pos, RuleFingerprintParamMissing, field, "header:%s is not a header parameter of the operation or its path item, and only declared headers are fingerprinted%s (declare it under parameters, or remove it from include)", it.Name, note(fromDefs))
				continue
			}
			name = prm.Name
		}
		if slices.ContainsFunc(p.ExcludeParams, func(x ParamRef) bool { return x.In == "header" && strings.EqualFold(x.Name, name) }) {
			r.errorf(pos, RuleFingerprintPointer, field, "header:%s is also in fingerprint.exclude%s (keep it in one list)", it.Name, note(fromDefs))
			continue
		}
		if k := VolatileHeader(name); k != "" {
			r.errorf(pos, RuleFingerprintVolatile, field, "header:%s is %s: fingerprinting it answers an honest retry that changes it with key-reused, and that retry is refused though nothing of the request changed%s (remove it from include unless a retry must send it unchanged)", name, k.Why(), note(fromDefs))
		}
		p.Include = append(p.Include, ParamRef{In: "header", Name: name})
	}
}

// unprinted lists the declared headers the default fingerprint leaves out ([VolatileHeader]).
func (r *resolver) unprinted(p *Policy) {
	if r.in.Op == nil {
		return
	}
	for _, prm := range r.in.Op.Params {
		k := VolatileHeader(prm.Name)
		if prm.In != "header" || k == "" || (p.Key.Header != "" && strings.EqualFold(prm.Name, p.Key.Header)) {
			continue
		}
		named := func(x ParamRef) bool { return x.In == "header" && strings.EqualFold(x.Name, prm.Name) }
		if slices.ContainsFunc(p.Include, named) || slices.ContainsFunc(p.ExcludeParams, named) {
			continue
		}
		p.Unprinted = append(p.Unprinted, Unprinted{Name: prm.Name, Kind: k})
	}
}

// keyLikeHeader returns the first declared header that looks like an idempotency key, or "".
func keyLikeHeader(ps []Param) string {
	for _, p := range ps {
		if p.In == "header" && KeyLikeRank(p.Name) > 0 {
			return p.Name
		}
	}
	return ""
}

// pathParamHint lists the path parameters a reference could have meant.
func pathParamHint(ps []Param) string {
	var names []string
	for _, p := range ps {
		if p.In == "path" {
			names = append(names, p.Name)
		}
	}
	if len(names) == 0 {
		return "the path has no parameters"
	}
	return "use one of: " + strings.Join(names, ", ")
}
