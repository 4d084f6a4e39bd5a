package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

// LintExtension is the extension that holds lint settings in a spec, at the document root or on
// an operation: {acknowledge: [{rule, operation, reason}]}.
const LintExtension = "x-idempotency-lint"

// Acknowledgement is a warning someone reviewed and accepted: rule on one operation, or on every
// operation when Operation is empty (possible at the document level and in a config file only),
// with the reason, which is mandatory. Errors cannot be acknowledged.
type Acknowledgement struct {
	Rule      string
	Operation string // an operationId or "POST /path", as written; "" for every operation
	Reason    string
	// Where is where it is written (its rule), and Field its path there
	// ("x-idempotency-lint.acknowledge[0]", "lint.acknowledge[2]"), for messages about it.
	Where policy.Position
	Field string
	// InSpec says it is written in the spec rather than a config file.
	InSpec bool
	route  string // the operation it is written on, for one inside an operation
}

// Acknowledged is a finding an acknowledgement accepted: out of Spec.Diagnostics, so it neither
// prints nor fails a run, and kept in Spec.Acknowledged, so lint can still show it.
type Acknowledged struct {
	Diagnostic
	By Acknowledgement
}

var ackFields = []string{"rule", "operation", "reason"}

// ParseLintSettings reads a lint settings mapping, {acknowledge: [...]}: the x-idempotency-lint
// extension of a spec (route is the operation it is written on, "" at the root) or the lint key
// of a config file (field "lint", route ""). Every problem is an acknowledgement-invalid error
// at its node.
func ParseLintSettings(file, field string, n *yaml.Node, route string) ([]Acknowledgement, []Diagnostic) {
	var acks []Acknowledgement
	var diags []Diagnostic
	bad := func(at *yaml.Node, format string, args ...any) {
		diags = append(diags, policy.NewDiagnostic(posOf(file, at), policy.RuleAcknowledgementInvalid, route, fmt.Sprintf(format, args...)))
	}
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		bad(n, "%s: expected a mapping like {acknowledge: [{rule: response-unbounded, reason: …}]}, got %s", field, show(n))
		return nil, diags
	}
	for _, kv := range pairs(n) {
		k, v := kv[0], kv[1]
		if k.Value != "acknowledge" {
			bad(k, "%s.%s: unknown field (the only one is acknowledge)", field, k.Value)
			continue
		}
		list := field + ".acknowledge"
		if v == nil || v.Kind != yaml.SequenceNode {
			bad(v, "%s: expected a list of {rule, operation, reason}, got %s", list, show(v))
			continue
		}
		for i, e := range v.Content {
			a, ds := parseAcknowledgement(file, fmt.Sprintf("%s[%d]", list, i), resolve(e), route)
			diags = append(diags, ds...)
			if a != nil {
				acks = append(acks, *a)
			}
		}
	}
	return acks, diags
}

func parseAcknowledgement(file, field string, e *yaml.Node, route string) (*Acknowledgement, []Diagnostic) {
	var diags []Diagnostic
	bad := func(at *yaml.Node, format string, args ...any) {
		diags = append(diags, policy.NewDiagnostic(posOf(file, at), policy.RuleAcknowledgementInvalid, route, fmt.Sprintf(format, args...)))
	}
	if e == nil || e.Kind != yaml.MappingNode {
		bad(e, "%s: expected a mapping {rule, operation, reason}, got %s", field, show(e))
		return nil, diags
	}
	a := &Acknowledgement{Field: field, Where: posOf(file, e), route: route}
	var ruleNode *yaml.Node
	for _, kv := range pairs(e) {
		k, v := kv[0], kv[1]
		name := field + "." + k.Value
		if slices.Contains(ackFields, k.Value) && !isString(v) {
			bad(v, "%s: expected a string, got %s", name, show(v))
			continue
		}
		switch k.Value {
		case "rule":
			a.Rule, ruleNode, a.Where = v.Value, v, posOf(file, v)
		case "operation":
			if route != "" {
				bad(k, "%s: not allowed inside an operation, whose acknowledgements are its own (remove it, or move the entry to the document's %s)", name, LintExtension)
				continue
			}
			a.Operation = strings.TrimSpace(v.Value)
		case "reason":
			a.Reason = strings.TrimSpace(v.Value)
		default:
			if s := DidYouMean(k.Value, ackFields); s != "" {
				bad(k, "%s: unknown field; did you mean %s?", name, s)
			} else {
				bad(k, "%s: unknown field (known fields: %s)", name, strings.Join(ackFields, ", "))
			}
		}
	}
	if len(diags) > 0 {
		// A misspelt or mistyped field is the one mistake: "no reason" after "reasn" would be
		// its echo.
		return nil, diags
	}
	ok := true
	switch {
	case ruleNode == nil:
		bad(e, "%s: no rule: name the warning it acknowledges (e.g. rule: response-unbounded)", field)
		ok = false
	case !knownRule(a.Rule):
		if s := DidYouMean(a.Rule, ruleIDs()); s != "" {
			bad(ruleNode, "%s.rule: %q is not a rule of idemgen lint; did you mean %s?", field, a.Rule, s)
		} else {
			bad(ruleNode, "%s.rule: %q is not a rule of idemgen lint (idemgen lint --format sarif lists them; docs/x-idempotency.md describes them)", field, a.Rule)
		}
		ok = false
	case a.Rule == policy.RuleAcknowledgementStale:
		bad(ruleNode, "%s.rule: a stale acknowledgement cannot be acknowledged: remove the acknowledgement it is about", field)
		ok = false
	case policy.RuleSeverity(a.Rule) == policy.SeverityError:
		bad(ruleNode, "%s.rule: %s is an error, and errors cannot be acknowledged: the generated code would be wrong (fix what it reports)", field, a.Rule)
		ok = false
	}
	if a.Reason == "" {
		bad(e, "%s: no reason: say why the warning is fine here (reason: …), so the next reader knows it was reviewed", field)
		ok = false
	}
	if !ok {
		return nil, diags
	}
	return a, diags
}

func ruleIDs() []string {
	var ids []string
	for _, r := range policy.Rules() {
		ids = append(ids, r.ID)
	}
	return ids
}

func knownRule(id string) bool { return slices.Contains(ruleIDs(), id) }

// Acknowledge moves the warnings acks accept from Diagnostics to Acknowledged, and adds an
// acknowledgement-stale warning, where the acknowledgement is written, for each one that accepts
// nothing (its operation does not exist, or has no such warning, or an earlier acknowledgement
// took it), so that acknowledgements do not outlive what they were about. Generate and lint call
// it with the config file's acknowledgements; the spec's own are applied by Load.
func (s *Spec) Acknowledge(acks []Acknowledgement) {
	for _, a := range acks {
		route, found := a.route, true
		if route == "" && a.Operation != "" {
			route, found = s.operationRoute(a.Operation)
		}
		matched := false
		if found {
			kept := s.Diagnostics[:0:0]
			for _, d := range s.Diagnostics {
				if d.Severity == policy.SeverityWarning && d.Rule == a.Rule && (route == "" || d.Operation == route) {
					s.Acknowledged = append(s.Acknowledged, Acknowledged{Diagnostic: d, By: a})
					matched = true
					continue
				}
				kept = append(kept, d)
			}
			s.Diagnostics = kept
		}
		if matched {
			continue
		}
		var msg string
		switch {
		case !found:
			msg = fmt.Sprintf("%s: acknowledges %s on %q, which names no operation of %s (use an operationId or \"POST /path\"; remove it if the operation is gone)", a.Field, a.Rule, a.Operation, s.File)
		case route == "":
			msg = fmt.Sprintf("%s: acknowledges %s, and %s has no such warning (remove the acknowledgement)", a.Field, a.Rule, s.File)
		default:
			msg = fmt.Sprintf("%s: acknowledges %s, and the operation has no such warning (remove the acknowledgement)", a.Field, a.Rule)
		}
		s.Diagnostics = append(s.Diagnostics, policy.NewDiagnostic(a.Where, policy.RuleAcknowledgementStale, route, msg))
	}
	sortDiagnostics(s.Diagnostics)
	sortAcknowledged(s.Acknowledged)
}

// operationRoute finds the operation name (an operationId, or "METHOD /path" in any case of the
// method) stands for.
func (s *Spec) operationRoute(name string) (string, bool) {
	method, path, isRoute := strings.Cut(name, " ")
	for _, o := range s.Model.Operations {
		if o.ID != "" && o.ID == name {
			return o.Route(), true
		}
		if isRoute && strings.EqualFold(method, o.Method) && strings.TrimSpace(path) == o.Path {
			return o.Route(), true
		}
	}
	return "", false
}

func sortAcknowledged(as []Acknowledged) {
	sort.SliceStable(as, func(i, j int) bool { return diagLess(as[i].Diagnostic, as[j].Diagnostic) })
}
