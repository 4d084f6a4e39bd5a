package spec

import (
	"fmt"
	"mime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// localRef follows a same-document $ref ("#/components/responses/Error") in the node tree; nil
// when it is not local or does not resolve.
func (b *builder) localRef(ref string) *yaml.Node {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	n := b.tree
	if n != nil && n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, tok := range strings.Split(ptr, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, n = lookup(n, tok); n == nil {
			return nil
		}
	}
	return n
}

// response returns the status key of code in the operation's responses and the response's own
// mapping, a local $ref followed (nil when it cannot be found in this file).
func (b *builder) response(opNode *yaml.Node, code string) (key, val *yaml.Node) {
	_, responses := lookup(opNode, "responses")
	key, val = lookup(responses, code)
	for i := 0; i < 8 && val != nil; i++ {
		_, r := lookup(val, "$ref")
		if !isString(r) {
			break
		}
		val = b.localRef(r.Value)
	}
	return key, val
}

// sortedCodes returns the status keys of op's responses in order.
func sortedCodes(op *openapi3.Operation) []string {
	if op.Responses == nil {
		return nil
	}
	codes := make([]string, 0, op.Responses.Len())
	for code := range op.Responses.Map() {
		codes = append(codes, code)
	}
	sort.Strings(codes)
	return codes
}

// headersNotReplayed warns about a header that a stored response of a storage response operation
// declares and a replay never carries (idemhttp.NeverReplayed: credentials, cookies, hop-by-hop
// headers): the first answer has it, every replay of it lacks it, and the spec says nothing of
// the difference. Reference and marker replays are answered anew by Replay<Op>, with the headers
// it sets, so they are not concerned.
func (b *builder) headersNotReplayed(o *model.Operation) {
	if o.Policy.Storage != policy.StorageResponse {
		return
	}
	for _, h := range o.ResponseHeaders {
		why := policy.MissingOnReplay(h.Name)
		if why == "" || !o.Policy.StoresStatus(h.Status) {
			continue
		}
		b.diags = append(b.diags, policy.NewDiagnostic(h.Pos, policy.RuleHeaderNotReplayed, o.Route(), fmt.Sprintf(
			"responses.%s.headers.%s: the runtime stores this response and its replays never carry %s: %s; a client that retries gets the answer without it (remove it from the response, or say in its description that only the first answer has it)",
			h.Status, h.Name, h.Name, why)))
	}
}

// ProblemCodesOn returns the runtime's problem codes answered with status on an operation whose
// mismatchStatus is mismatch, from the runtime's one table. not-found and method-not-allowed
// answer requests that reach no operation, so an operation never shares them; nor
// operation-uncertain, which only an operation declared uncertainOnLoss answers
// ([ProblemCodesFor]).
func ProblemCodesOn(status, mismatch int) []string {
	return problemCodesOn(status, mismatch, false)
}

// ProblemCodesFor is [ProblemCodesOn] for an operation's resolved policy: with uncertainOnLoss,
// its 409 is also operation-uncertain.
func ProblemCodesFor(status int, p *policy.Policy) []string {
	return problemCodesOn(status, p.MismatchStatus, p.UncertainOnLoss)
}

func problemCodesOn(status, mismatch int, uncertain bool) []string {
	var out []string
	for _, code := range idemhttp.ProblemCodes() {
		if code == idemhttp.CodeNotFound || code == idemhttp.CodeMethodNotAllowed || (code == idemhttp.CodeOperationUncertain && !uncertain) {
			continue
		}
		s := idemhttp.ProblemStatus(code)
		if s == 0 {
			s = mismatch
		}
		if s == status {
			out = append(out, code)
		}
	}
	return out
}

// NonProblemBody describes the body a response declares ("schema Error (application/json)", or
// its media types when the schema is inline) when none of its media types is
// application/problem+json; "" when one is, or when it declares no content.
func NonProblemBody(ref *openapi3.ResponseRef) string {
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return ""
	}
	types := make([]string, 0, len(ref.Value.Content))
	for mt := range ref.Value.Content {
		types = append(types, mt)
	}
	sort.Strings(types)
	if slices.ContainsFunc(types, IsProblemMediaType) {
		return ""
	}
	what := strings.Join(types, ", ")
	if media := ref.Value.Content[types[0]]; media != nil && media.Schema != nil && media.Schema.Ref != "" {
		what = "schema " + media.Schema.Ref[strings.LastIndex(media.Schema.Ref, "/")+1:] + " (" + what + ")"
	}
	return what
}

// IsProblemMediaType reports whether mt (parameters allowed) is application/problem+json.
func IsProblemMediaType(mt string) bool {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		base = strings.ToLower(strings.TrimSpace(mt))
	}
	return base == idemwire.MediaTypeProblem
}

// errorsNotProblem warns when an idempotent operation declares, for a status the runtime also
// answers with an application/problem+json problem, a body of another media type only: a client
// that decodes that status by the spec fails on the runtime's answers. A response with no
// content says nothing of the body and stays quiet. A 409 that conflict-status-shared reports is
// reported here too: each finding asks for its own fix, and one must not hide the other.
func (b *builder) errorsNotProblem(o *model.Operation, op *openapi3.Operation, opNode, anchor *yaml.Node) {
	for _, code := range sortedCodes(op) {
		status, err := strconv.Atoi(code)
		if err != nil {
			continue
		}
		codes := ProblemCodesFor(status, o.Policy)
		if len(codes) == 0 {
			continue
		}
		what := NonProblemBody(op.Responses.Value(code))
		if what == "" {
			continue
		}
		n := anchor
		if k, _ := b.response(opNode, code); k != nil {
			n = k
		}
		b.report(n, policy.RuleErrorNotProblem, o.Route(), fmt.Sprintf(
			"responses.%s: declares %s, but the runtime also answers %d with application/problem+json (%s) on this operation; a client that decodes the %d by the spec fails on those (add application/problem+json to this response, e.g. with the IdempotencyProblem schema idemgen annotate writes; or configure an idemhttp.Renderer that answers refusals in this schema and set x-idempotency renderer: custom)",
			code, what, status, CodesPhrase(codes), status))
	}
}

// CodesPhrase is "code x" or "codes x, y".
func CodesPhrase(codes []string) string {
	if len(codes) == 1 {
		return "code " + codes[0]
	}
	return "codes " + strings.Join(codes, ", ")
}
