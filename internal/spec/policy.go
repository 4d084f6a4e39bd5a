package spec

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

var policyFields = []string{"storage", "ttl", "lease", "timeout", "scope", "key", "fingerprint", "persist", "claim", "wait", "mismatchStatus", "replayHeaders", "echoHeaders", "renderer", "history", "uncertainOnLoss", "delivery"}

var keyFields = []string{"header", "from", "required", "maxLength", "pattern"}

// checker reads one x-idempotency mapping from YAML nodes into a policy.Raw: it checks the
// YAML types here and leaves what a value means to package policy. op is "" at the root.
type checker struct {
	b  *builder
	op string
}

func (c *checker) errorf(n *yaml.Node, rule, format string, args ...any) {
	c.b.report(n, rule, c.op, fmt.Sprintf(format, args...))
}

// problem reports a value policy refused, under the field's name.
func (c *checker) problem(n *yaml.Node, field string, p *policy.Finding) {
	c.errorf(n, p.Rule, "%s: %s", field, p.Msg)
}

func (c *checker) pos(n *yaml.Node) policy.Position { return posOf(c.b.file, n) }

func (c *checker) unknown(k *yaml.Node, field string, known []string) {
	if f := DidYouMean(k.Value, known); f != "" {
		c.errorf(k, policy.RuleUnknownField, "%s.%s: unknown field; did you mean %s?", field, k.Value, f)
		return
	}
	c.errorf(k, policy.RuleUnknownField, "%s.%s: unknown field (known fields: %s)", field, k.Value, strings.Join(known, ", "))
}

func isScalar(n *yaml.Node) bool { return n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" }

func (c *checker) str(field string, n *yaml.Node) (string, bool) {
	if !isScalar(n) || n.Tag != "!!str" {
		c.errorf(n, policy.RuleTypeInvalid, "%s: expected a string, got %s", field, show(n))
		return "", false
	}
	return n.Value, true
}

func (c *checker) list(field string, n *yaml.Node, example string) ([]*yaml.Node, bool) {
	if n == nil || n.Kind != yaml.SequenceNode {
		c.errorf(n, policy.RuleTypeInvalid, "%s: expected a list like %s, got %s", field, example, show(n))
		return nil, false
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		out[i] = resolve(e)
	}
	return out, true
}

// item is a list item of the type policy reads, with its node and its place in the list.
type item struct {
	node  *yaml.Node
	index int
}

// strings reads a list whose items accept is true for, reporting the others with bad. The
// values come back with the items they were read from; isList is false when n is no list, and
// ok false when it is not one or any item was refused.
func (c *checker) strings(field string, n *yaml.Node, example string, accept func(*yaml.Node) bool, bad func(name string, e *yaml.Node)) (values []string, from []item, isList, ok bool) {
	nodes, ok := c.list(field, n, example)
	if !ok {
		return nil, nil, false, false
	}
	for i, e := range nodes {
		if !accept(e) {
			bad(fmt.Sprintf("%s[%d]", field, i), e)
			ok = false
			continue
		}
		values, from = append(values, e.Value), append(from, item{e, i})
	}
	return values, from, true, ok
}

// items reports the problems policy found with a list's items; it is false when there was one.
func (c *checker) items(field string, list *yaml.Node, from []item, probs []policy.ItemFinding) bool {
	for _, p := range probs {
		if p.Index < 0 {
			c.problem(list, field, p.Finding)
			continue
		}
		it := from[p.Index]
		c.problem(it.node, fmt.Sprintf("%s[%d]", field, it.index), p.Finding)
	}
	return len(probs) == 0
}

func isString(n *yaml.Node) bool { return isScalar(n) && n.Tag == "!!str" }

// parsePolicy reads an x-idempotency mapping field by field.
func (c *checker) parsePolicy(m *yaml.Node) *policy.Raw {
	p := &policy.Raw{}
	const f = "x-idempotency"
	for _, kv := range pairs(m) {
		k, v := kv[0], kv[1]
		name := f + "." + k.Value
		switch k.Value {
		case "storage":
			if s, ok := c.str(name, v); ok {
				if st, prob := policy.ParseStorage(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					p.Storage = policy.Value(st, c.pos(v))
				}
			}
		case "claim":
			if s, ok := c.str(name, v); ok {
				if cl, prob := policy.ParseClaim(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					p.Claim = policy.Value(cl, c.pos(v))
				}
			}
		case "ttl", "lease", "wait", "timeout":
			if !isScalar(v) || (v.Tag != "!!str" && v.Tag != "!!int" && v.Tag != "!!float") {
				c.errorf(v, policy.RuleDurationInvalid, "%s: %s is not a duration (use e.g. 24h or 3d)", name, show(v))
				break
			}
			d, prob := policy.ParseDurationField(k.Value, v.Value)
			if prob != nil {
				c.problem(v, name, prob)
				break
			}
			set := policy.Value(d, c.pos(v))
			switch k.Value {
			case "ttl":
				p.TTL = set
			case "lease":
				p.Lease = set
			case "timeout":
				p.Timeout = set
			default:
				p.Wait = set
			}
		case "mismatchStatus":
			if !isScalar(v) || v.Tag != "!!int" {
				c.errorf(v, policy.RuleTypeInvalid, "%s: expected a status code (422, 409 or 400), got %s", name, show(v))
				break
			}
			n, err := strconv.Atoi(v.Value)
			if err != nil {
				n = -1
			}
			if st, prob := policy.ParseMismatchStatus(n); prob != nil {
				c.errorf(v, prob.Rule, "%s: %s is not allowed (use 422, 409 or 400)", name, v.Value)
			} else {
				p.MismatchStatus = policy.Value(st, c.pos(v))
			}
		case "persist":
			p.Persist = c.persist(name, v)
		case "scope":
			p.Scope = c.scope(name, v)
		case "replayHeaders":
			p.ReplayHeaders = c.replayHeaders(name, v)
		case "echoHeaders":
			p.EchoHeaders = c.echoHeaders(name, v)
		case "renderer":
			if s, ok := c.str(name, v); ok {
				if rd, prob := policy.ParseRenderer(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					p.Renderer = policy.Value(rd, c.pos(v))
				}
			}
		case "history":
			p.History = c.boolean(name, v)
		case "uncertainOnLoss":
			p.UncertainOnLoss = c.boolean(name, v)
		case "key":
			p.Key = c.key(name, v)
		case "delivery":
			p.Delivery = c.delivery(name, v)
		case "fingerprint":
			c.fingerprint(name, v, p)
		default:
			c.unknown(k, f, policyFields)
		}
	}
	return p
}

// boolean reads a field that is true or false; anything else is reported and leaves it unset.
func (c *checker) boolean(name string, v *yaml.Node) policy.Field[bool] {
	if !isScalar(v) || v.Tag != "!!bool" {
		c.errorf(v, policy.RuleTypeInvalid, "%s: expected true or false, got %s", name, show(v))
		return policy.Field[bool]{}
	}
	return policy.Value(v.Value == "true", c.pos(v))
}

// placed pairs parsed items with the nodes they were read from; policy's parsers keep the order
// of the items they accept, and placed is called only when they accepted all of them.
func placed[T any](c *checker, items []T, from []item) []policy.Placed[T] {
	out := make([]policy.Placed[T], len(items))
	for i, it := range items {
		out[i] = policy.Placed[T]{V: it, Pos: c.pos(from[i].node)}
	}
	return out
}

func (c *checker) key(field string, n *yaml.Node) policy.RawKey {
	var k policy.RawKey
	if n == nil || n.Kind != yaml.MappingNode {
		c.errorf(n, policy.RuleTypeInvalid, "%s: expected a mapping like {header: Idempotency-Key}, got %s", field, show(n))
		return k
	}
	var fromNode, requiredNode *yaml.Node
	for _, kv := range pairs(n) {
		kn, v := kv[0], kv[1]
		name := field + "." + kn.Value
		switch kn.Value {
		case "header":
			if s, ok := c.str(name, v); ok {
				if h, prob := policy.ParseKeyHeader(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					k.Header = policy.Value(h, c.pos(v))
				}
			}
		case "from":
			if s, ok := c.str(name, v); ok {
				if param, prob := policy.ParseKeyFrom(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					k.From, fromNode = policy.Value(param, c.pos(v)), v
				}
			}
		case "required":
			if !isScalar(v) || v.Tag != "!!bool" {
				c.errorf(v, policy.RuleTypeInvalid, "%s: expected true or false, got %s", name, show(v))
				break
			}
			k.Required, requiredNode = policy.Value(v.Value == "true", c.pos(v)), v
		case "maxLength":
			if !isScalar(v) || v.Tag != "!!int" {
				c.errorf(v, policy.RuleTypeInvalid, "%s: expected a number, got %s", name, show(v))
				break
			}
			if ml, prob := policy.ParseKeyMaxLength(v.Value); prob != nil {
				c.problem(v, name, prob)
			} else {
				k.MaxLength = policy.Value(ml, c.pos(v))
			}
		case "pattern":
			if s, ok := c.str(name, v); ok {
				if pat, prob := policy.ParseKeyPattern(s); prob != nil {
					c.problem(v, name, prob)
				} else {
					k.Pattern = policy.Value(pat, c.pos(v))
				}
			}
		default:
			c.unknown(kn, field, keyFields)
		}
	}
	if k.Header.Set && k.From.Set {
		c.errorf(fromNode, policy.RuleKeyConflict, "%s: has both header and from; a key comes from one place (keep one)", field)
		k.Header, k.From = policy.Field[string]{}, policy.Field[string]{}
	}
	if k.From.Set && k.Required.Set && !k.Required.V {
		c.errorf(requiredNode, policy.RuleKeyInvalid, "%s.required: a path parameter is always present, so a path key cannot be optional (remove required)", field)
	}
	return k
}

func (c *checker) fingerprint(field string, n *yaml.Node, p *policy.Raw) {
	switch {
	case isScalar(n) && n.Tag == "!!bool":
		p.Fingerprint = policy.Value(n.Value == "true", c.pos(n))
	case n != nil && n.Kind == yaml.MappingNode:
		p.Fingerprint = policy.Value(true, c.pos(n))
		for _, kv := range pairs(n) {
			k, v := kv[0], kv[1]
			if k.Value == "include" {
				name := field + ".include"
				values, from, isList, ok := c.strings(name, v, "[header:X-Jws-Signature]", isString,
					func(name string, e *yaml.Node) { c.str(name, e) })
				if !isList {
					continue
				}
				items, probs := policy.ParseIncludes(values)
				if c.items(name, v, from, probs) && ok {
					p.Include = policy.Value(placed(c, items, from), c.pos(v))
				}
				continue
			}
			if k.Value != "exclude" {
				c.unknown(k, field, []string{"exclude", "include"})
				continue
			}
			name := field + ".exclude"
			values, from, isList, ok := c.strings(name, v, "[/metadata/requestTime, header:X-Request-Id]", isString,
				func(name string, e *yaml.Node) { c.str(name, e) })
			if !isList {
				continue
			}
			items, probs := policy.ParseExcludes(values)
			if c.items(name, v, from, probs) && ok {
				p.Exclude = policy.Value(placed(c, items, from), c.pos(v))
			}
		}
	default:
		c.errorf(n, policy.RuleTypeInvalid, "%s: expected true, false or {exclude: [JSON pointers, header:<Name>, query:<name>], include: [header:<Name>]}, got %s", field, show(n))
	}
}

// persist reads a persist list: status classes and codes, as strings or numbers.
func (c *checker) persist(name string, v *yaml.Node) policy.Field[[]string] {
	values, from, isList, ok := c.strings(name, v, "[2xx, 404]", func(e *yaml.Node) bool {
		return isScalar(e) && (e.Tag == "!!str" || e.Tag == "!!int")
	}, func(name string, e *yaml.Node) {
		c.errorf(e, policy.RulePersistInvalid, "%s: %s is not a status class or code (use e.g. 2xx or 404)", name, show(e))
	})
	if !isList || (len(values) == 0 && len(v.Content) > 0) {
		return policy.Field[[]string]{}
	}
	persist, probs := policy.ParsePersist(values)
	if c.items(name, v, from, probs) && ok {
		return policy.Value(persist, c.pos(v))
	}
	return policy.Field[[]string]{}
}

// scope reads a scope list, keeping each item's place for the messages Resolve writes.
func (c *checker) scope(name string, v *yaml.Node) policy.Field[[]policy.Placed[policy.ScopeItem]] {
	values, from, isList, ok := c.strings(name, v, "[tenant, operation]", isString,
		func(name string, e *yaml.Node) { c.problem(e, name, policy.ScopeItemInvalid(show(e))) })
	if !isList {
		return policy.Field[[]policy.Placed[policy.ScopeItem]]{}
	}
	scope, probs := policy.ParseScope(values)
	if c.items(name, v, from, probs) && ok {
		return policy.Value(placed(c, scope, from), c.pos(v))
	}
	return policy.Field[[]policy.Placed[policy.ScopeItem]]{}
}

// replayHeaders reads the headers a replay carries besides the default allow-list.
func (c *checker) replayHeaders(name string, v *yaml.Node) policy.Field[[]string] {
	values, from, isList, ok := c.strings(name, v, "[X-Request-Cost]", isString,
		func(name string, e *yaml.Node) { c.str(name, e) })
	if !isList {
		return policy.Field[[]string]{}
	}
	headers, probs := policy.ParseReplayHeaders(values)
	if c.items(name, v, from, probs) && ok {
		return policy.Value(headers, c.pos(v))
	}
	return policy.Field[[]string]{}
}

// echoHeaders reads the response headers every answer takes from the current request.
func (c *checker) echoHeaders(name string, v *yaml.Node) policy.Field[[]string] {
	values, from, isList, ok := c.strings(name, v, "[x-fapi-interaction-id]", isString,
		func(name string, e *yaml.Node) { c.str(name, e) })
	if !isList {
		return policy.Field[[]string]{}
	}
	headers, probs := policy.ParseEchoHeaders(values)
	if c.items(name, v, from, probs) && ok {
		return policy.Value(headers, c.pos(v))
	}
	return policy.Field[[]string]{}
}
