package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/runtime/idemwire"
)

// The document-level lint rules: what the document declares around an operation's
// x-idempotency (its parameters, its responses and their headers), as opposed to the rules
// Resolve applies to x-idempotency's own values. Package spec reads the facts from the document,
// each with its place, into a LintInput; the rules, their messages and the places they report
// are here, with every other rule.

// LintInput is what the document-level rules read of one operation.
type LintInput struct {
	Route  string // "POST /v1/payments"
	Method string // upper case
	// Pos is the operation's key, or its path's when the operation lives in another file.
	Pos Position
	// Missing: the operation has no x-idempotency at all. Off: it says x-idempotency: false, a
	// deliberate opt-out.
	Missing, Off bool
	// Policy is the resolved policy; nil when the operation is not idempotent, or its
	// x-idempotency is of the wrong type (reported as such).
	Policy *Policy
	Params []Param
	// Responses are the responses the operation declares, in the order of their status keys.
	Responses []DeclaredResponse
	// ResponseHeaders are the headers those responses declare, by status, then name.
	ResponseHeaders []ResponseHeader
}

// DeclaredResponse is one response an operation declares.
type DeclaredResponse struct {
	Status      string   // as the spec keys it: "201", "2XX", "default"
	Pos         Position // its status key, or the operation's when it is not in this file
	Description string
	Headers     []string // the header names it declares
	// NonProblemBody describes its body when none of its media types is
	// application/problem+json ("schema Error (application/json)"); "" when one is, or when it
	// declares no content.
	NonProblemBody string
}

// ResponseHeader is one header a response declares.
type ResponseHeader struct {
	Status string // as the spec keys the response: "201", "2XX", "default"
	Name   string // as written
	Pos    Position
}

// Lint applies the document-level rules to one operation: post-without-idempotency,
// accepted-without-location, response-header-not-replayed, conflict-status-shared,
// error-response-not-problem and key-header-unused.
func Lint(in *LintInput) []Diagnostic {
	var out []Diagnostic
	if in.Missing && in.Method == "POST" {
		out = append(out, NewDiagnostic(in.Pos, RulePostWithout, in.Route, "POST without x-idempotency: a retried request may run twice (add x-idempotency: true, or x-idempotency: false to opt out on purpose; idemgen annotate adds it)"))
	}
	if p := in.Policy; p != nil {
		out = append(out, acceptedWithoutLocation(in)...)
		out = append(out, headersNotReplayed(in)...)
		if p.Renderer != RendererCustom {
			// With the API's own renderer, refusals take the error format the spec declares:
			// its error responses are right as they are.
			out = append(out, conflictShared(in)...)
			out = append(out, errorsNotProblem(in)...)
		} else {
			out = append(out, refusalsUndocumented(in)...)
		}
	}
	// The unused-key-header warning is for operations without x-idempotency and for policies
	// keyed elsewhere; an explicit opt-out is deliberate, and an invalid x-idempotency has its
	// error.
	if !in.Off && (in.Missing || in.Policy != nil) {
		out = append(out, unusedKeyHeaders(in)...)
	}
	return out
}

func (in *LintInput) response(status string) *DeclaredResponse {
	for i := range in.Responses {
		if in.Responses[i].Status == status {
			return &in.Responses[i]
		}
	}
	return nil
}

// acceptedWithoutLocation warns when an idempotent operation answers 202 Accepted without
// declaring a Location header on it. A 202 says the work is queued, not done: the client learns
// how it ends only by following the status resource the answer points at, and a retry with the
// same key replays that same 202 (Location is on the replay allow-list), so the link is the
// whole answer. Without it, neither the first answer nor its replays tell the client where to look.
func acceptedWithoutLocation(in *LintInput) []Diagnostic {
	r := in.response("202")
	if r == nil {
		return nil
	}
	for _, name := range r.Headers {
		if strings.EqualFold(name, "Location") {
			return nil
		}
	}
	return []Diagnostic{NewDiagnostic(r.Pos, RuleAcceptedWithoutLocation, in.Route, "responses.202: an idempotent 202 starts work that finishes later, and its replays repeat it unchanged, so it must say where the outcome will be: declare a Location header on the 202 (the URL of a status resource that reports pending, succeeded or failed) and set it in the handler")}
}

// headersNotReplayed warns about a header that a stored response of a storage response operation
// declares and a replay never carries (idemhttp.NeverReplayed: credentials, cookies, hop-by-hop
// headers): the first answer has it, every replay of it lacks it, and the spec says nothing of
// the difference. Reference and marker replays are answered anew by Replay<Op>, with the headers
// it sets, so they are not concerned.
func headersNotReplayed(in *LintInput) []Diagnostic {
	if in.Policy.Storage != StorageResponse {
		return nil
	}
	var out []Diagnostic
	for _, h := range in.ResponseHeaders {
		why := MissingOnReplay(h.Name)
		if why == "" || !in.Policy.StoresStatus(h.Status) {
			continue
		}
		out = append(out, NewDiagnostic(h.Pos, RuleHeaderNotReplayed, in.Route, fmt.Sprintf(
			"responses.%s.headers.%s: the runtime stores this response and its replays never carry %s: %s; a client that retries gets the answer without it (remove it from the response, or say in its description that only the first answer has it)",
			h.Status, h.Name, h.Name, why)))
	}
	return out
}

// conflictShared warns when an idempotent operation declares a 409 of its own (out of stock, a
// state conflict): the runtime answers a duplicate that arrives while the first request is still
// running with 409 in-progress, and a reused key with 409 too when mismatchStatus is 409, so the
// status alone no longer tells a client which happened. A 409 whose description already names
// the in-progress answer (annotate's IdempotencyRefusal response does) is taken as documenting both.
func conflictShared(in *LintInput) []Diagnostic {
	r := in.response("409")
	if r == nil {
		return nil
	}
	if l := strings.ToLower(r.Description); strings.Contains(l, "in-progress") || strings.Contains(l, "in progress") {
		return nil
	}
	also := `a duplicate of a request still running (problem code "in-progress")`
	if in.Policy.MismatchStatus == 409 {
		also += ` and a key reused with another request (code "key-reused", since mismatchStatus is 409)`
	}
	if in.Policy.UncertainOnLoss {
		also += ` and a key whose earlier attempt was lost after a provider call (code "operation-uncertain", since uncertainOnLoss is set)`
	}
	return []Diagnostic{NewDiagnostic(r.Pos, RuleConflictStatusShared, in.Route, fmt.Sprintf("responses.409: this 409 now also answers %s; clients tell them apart by the problem's code, not the status (say so in the response's description, or give the operation's own conflict another status; or, when the server renders refusals in the API's own format, set x-idempotency renderer: custom)", also))}
}

// errorsNotProblem warns when an idempotent operation declares, for a status the runtime also
// answers with an application/problem+json problem, a body of another media type only: a client
// that decodes that status by the spec fails on the runtime's answers. A response with no
// content says nothing of the body and stays quiet. A 409 that conflict-status-shared reports is
// reported here too: each finding asks for its own fix, and one must not hide the other.
func errorsNotProblem(in *LintInput) []Diagnostic {
	var out []Diagnostic
	for _, r := range in.Responses {
		status, err := strconv.Atoi(r.Status)
		if err != nil || r.NonProblemBody == "" {
			continue
		}
		codes := ProblemCodesFor(status, in.Policy)
		if len(codes) == 0 {
			continue
		}
		out = append(out, NewDiagnostic(r.Pos, RuleErrorNotProblem, in.Route, fmt.Sprintf(
			"responses.%s: declares %s, but the runtime also answers %d with application/problem+json (%s) on this operation; a client that decodes the %d by the spec fails on those (add application/problem+json to this response, e.g. with the IdempotencyProblem schema idemgen annotate writes; or configure an idemhttp.Renderer that answers refusals in this schema and set x-idempotency renderer: custom)",
			r.Status, r.NonProblemBody, status, CodesPhrase(codes), status)))
	}
	return out
}

// refusalsUndocumented warns when an operation whose refusals the API's own renderer writes
// (renderer: custom) declares no response on statuses they take: 400 for a missing or malformed
// key, 409 for a duplicate in progress, the mismatchStatus for a reused key, 503 for a store
// outage. The server answers them all the same, in the API's format; the spec does not say so,
// so a client generated from it does not expect them. A default response, or a 4XX or 5XX range,
// covers the statuses it spans.
func refusalsUndocumented(in *LintInput) []Diagnostic {
	statuses := []int{400, 409, in.Policy.MismatchStatus, 503}
	slices.Sort(statuses)
	statuses = slices.Compact(statuses)
	var missing []string
	for _, st := range statuses {
		code := strconv.Itoa(st)
		if in.response(code) == nil && in.response(code[:1]+"XX") == nil && in.response(strings.ToLower(code[:1])+"xx") == nil && in.response("default") == nil {
			missing = append(missing, fmt.Sprintf("%s (%s)", code, CodesPhrase(ProblemCodesFor(st, in.Policy))))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return []Diagnostic{NewDiagnostic(in.Pos, RuleRefusalsUndocumented, in.Route, fmt.Sprintf(
		"renderer: custom: the server refuses this operation's requests in the API's own error format on %s, which the operation does not declare, so a client built from the spec does not expect them (declare them with the API's error schema; idemgen annotate does when the spec's error responses share one)",
		strings.Join(missing, ", ")))}
}

// unusedKeyHeaders warns about a declared header that looks like an idempotency key
// (KeyLikeRank) and is not the operation's key.
func unusedKeyHeaders(in *LintInput) []Diagnostic {
	// A path item may declare the key header for all its methods; on a safe method without a
	// policy it is simply not needed there.
	if in.Policy == nil && SafeMethod(in.Method) {
		return nil
	}
	var out []Diagnostic
	for _, prm := range in.Params {
		if prm.In != "header" || KeyLikeRank(prm.Name) == 0 {
			continue
		}
		d := NewDiagnostic(prm.Pos, RuleKeyHeaderUnused, in.Route, "")
		switch {
		case in.Policy == nil:
			d.Message = fmt.Sprintf("header %s looks like an idempotency key, but the operation has no x-idempotency, so it is ignored (add x-idempotency: {key: {header: %s}}, or x-idempotency: false to opt out on purpose)", prm.Name, prm.Name)
		case in.Policy.Delivery != nil && !strings.EqualFold(in.Policy.Key.Header, prm.Name):
			d.Message = fmt.Sprintf("header %s looks like an idempotency key, but this webhook receiver's key is the delivery id (%s), which its sender sends on every attempt (remove the parameter)", prm.Name, in.Policy.Delivery.KeySource())
		case in.Policy.Key.Header == "" || !strings.EqualFold(in.Policy.Key.Header, prm.Name):
			using := in.Policy.Key.Header
			if using == "" {
				using = "path:" + in.Policy.Key.PathParam
			}
			d.Message = fmt.Sprintf("header %s looks like an idempotency key, but the key comes from %s (set x-idempotency.key.header: %s, or remove the parameter)", prm.Name, using, prm.Name)
		default:
			continue
		}
		out = append(out, d)
	}
	return out
}

// ProblemCodesOn returns the runtime's problem codes answered with status on an operation whose
// mismatchStatus is mismatch, from the runtime's one table (idemwire). not-found and
// method-not-allowed answer requests that reach no operation, so an operation never shares them;
// nor operation-uncertain, which only an operation declared uncertainOnLoss answers
// ([ProblemCodesFor]).
func ProblemCodesOn(status, mismatch int) []string {
	return problemCodesOn(status, mismatch, false, false)
}

// ProblemCodesFor is [ProblemCodesOn] for an operation's resolved policy: with uncertainOnLoss,
// its 409 is also operation-uncertain.
func ProblemCodesFor(status int, p *Policy) []string {
	return problemCodesOn(status, p.MismatchStatus, p.UncertainOnLoss, p.Delivery != nil)
}

func problemCodesOn(status, mismatch int, uncertain, receiver bool) []string {
	var out []string
	for _, code := range idemwire.ProblemCodes() {
		if code == idemwire.CodeNotFound || code == idemwire.CodeMethodNotAllowed || (code == idemwire.CodeOperationUncertain && !uncertain) ||
			(code == idemwire.CodeSignatureInvalid && !receiver) {
			continue
		}
		s := idemwire.ProblemStatus(code)
		if s == 0 {
			s = mismatch
		}
		if s == status {
			out = append(out, code)
		}
	}
	return out
}

// CodesPhrase is "code x" or "codes x, y".
func CodesPhrase(codes []string) string {
	if len(codes) == 1 {
		return "code " + codes[0]
	}
	return "codes " + strings.Join(codes, ", ")
}
