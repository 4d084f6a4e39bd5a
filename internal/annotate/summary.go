package annotate

import (
	"fmt"
	"strings"

	"github.com/idemgen/idemgen/internal/policy"
)

// The notes annotate prints on stderr are for a person reviewing the change: a spec whose 44
// operations share one error response gets one line about it, not 44.

// routesPhrase names up to three routes and counts the rest.
func routesPhrase(routes []string) string {
	const shown = 3
	if len(routes) <= shown {
		return strings.Join(routes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(routes[:shown], ", "), len(routes)-shown)
}

// KeptSummary is one line per kind of error response kept (its status, what it declares and
// the runtime's codes on that status), naming the first place and how many operations share it,
// in the order they were first met.
func KeptSummary(kept []Kept) []string {
	type group struct {
		first  Kept
		routes []string
	}
	var order []string
	groups := map[string]*group{}
	for _, k := range kept {
		id := fmt.Sprintf("%d\x00%s\x00%s", k.Status, k.Declared, strings.Join(k.Codes, ","))
		g := groups[id]
		if g == nil {
			g = &group{first: k}
			groups[id] = g
			order = append(order, id)
		}
		g.routes = append(g.routes, k.Route)
	}
	out := make([]string, 0, len(order))
	for _, id := range order {
		g := groups[id]
		if len(g.routes) == 1 {
			out = append(out, g.first.String())
			continue
		}
		k := g.first
		out = append(out, fmt.Sprintf("%s:%d:%d: responses.%d of %d operations (%s): kept your %s; the runtime answers application/problem+json with %s on this status (declare application/problem+json beside it, e.g. with the %s schema; or answer refusals in your format with an idemhttp.Renderer and set x-idempotency renderer: custom)",
			k.File, k.Line, k.Col, k.Status, len(g.routes), routesPhrase(g.routes), k.Declared, policy.CodesPhrase(k.Codes), ProblemSchemaName))
	}
	return out
}

// UnprintedSummary is one line per set of headers left out of the fingerprint, with the
// operations that leave out that set, in the order they were first met.
func UnprintedSummary(unprinted []Unprinted) []string {
	var order []string
	routes := map[string][]string{}
	for _, u := range unprinted {
		names := make([]string, len(u.Headers))
		for i, h := range u.Headers {
			names[i] = fmt.Sprintf("%s (%s)", h.Name, h.Kind)
		}
		id := strings.Join(names, ", ")
		if _, ok := routes[id]; !ok {
			order = append(order, id)
		}
		routes[id] = append(routes[id], u.Route)
	}
	out := make([]string, 0, len(order))
	for _, id := range order {
		rs := routes[id]
		out = append(out, fmt.Sprintf("%d operation(s) (%s) leave out of the fingerprint: %s; an honest retry sends new ones, which must not make it a different request (to fingerprint one anyway, list it under x-idempotency fingerprint.include)",
			len(rs), routesPhrase(rs), id))
	}
	return out
}

// UndeclaredSummary is the line about the operations whose refusals annotate left undeclared
// (renderer: custom, and no error body of the spec's own), or "".
func UndeclaredSummary(file string, routes []string) string {
	if len(routes) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: renderer: custom, and the spec declares no error body of its own (a media type and schema its error responses share): no refusal responses added to %d operation(s) (%s), since the server does not answer them with RFC 9457 problems; declare them with the API's error schema (lint: refusals-undocumented)",
		file, len(routes), routesPhrase(routes))
}
