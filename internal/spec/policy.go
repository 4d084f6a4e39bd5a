package spec

import (
	"fmt"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/model"
)

// setting is one x-idempotency field as written: ok is false when the field is absent or invalid
// (an invalid field has been reported already and falls back to the default, so one mistake gives
// one diagnostic, not a cascade).
type setting[T any] struct {
	ok   bool
	v    T
	node *yaml.Node // the value, for positions
}

func set[T any](v T, n *yaml.Node) setting[T] { return setting[T]{ok: true, v: v, node: n} }

type scopeItem struct {
	kind, name string
	node       *yaml.Node
}

// excludeItem is one fingerprint.exclude entry as written: a JSON pointer into the body
// (kind "body"), or a parameter, header:<Name> or query:<name>. path:<name> parses too, so that
// resolve can say why a path parameter cannot be excluded rather than call it malformed.
type excludeItem struct {
	kind, name string
	node       *yaml.Node
}

type rawKey struct {
	header    setting[string]
	from      setting[string] // the path parameter's name
	required  setting[bool]
	maxLength setting[int]
	pattern   setting[string]
}

// rawPolicy is an x-idempotency mapping as written, every field checked on its own. Checks that
// need the operation (parameters, body, responses) or the merged policy come later, in resolve.
type rawPolicy struct {
	storage, claim   setting[string]
	ttl, lease, wait setting[time.Duration]
	timeout          setting[time.Duration]
	mismatch         setting[int]
	persist          setting[[]string]
	scope            setting[[]scopeItem]
	key              rawKey
	fingerprint      setting[bool]
	exclude          setting[[]excludeItem]
	replayHeaders    setting[[]string]
}

var policyFields = []string{"storage", "ttl", "lease", "timeout", "scope", "key", "fingerprint", "persist", "claim", "wait", "mismatchStatus", "replayHeaders"}

var keyFields = []string{"header", "from", "required", "maxLength", "pattern"}

// checker reports field-level problems for one x-idempotency mapping; op is "" at the root.
type checker struct {
	b  *builder
	op string
}

func (c *checker) errorf(n *yaml.Node, rule, format string, args ...any) {
	c.b.report(n, rule, c.op, fmt.Sprintf(format, args...))
}

func (c *checker) unknown(k *yaml.Node, field string, known []string) {
	if f := DidYouMean(k.Value, known); f != "" {
		c.errorf(k, RuleUnknownField, "%s.%s: unknown field; did you mean %s?", field, k.Value, f)
		return
	}
	c.errorf(k, RuleUnknownField, "%s.%s: unknown field (known fields: %s)", field, k.Value, strings.Join(known, ", "))
}

func isScalar(n *yaml.Node) bool { return n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" }

func (c *checker) str(field string, n *yaml.Node) (string, bool) {
	if !isScalar(n) || n.Tag != "!!str" {
		c.errorf(n, RuleTypeInvalid, "%s: expected a string, got %s", field, show(n))
		return "", false
	}
	return n.Value, true
}

func (c *checker) list(field string, n *yaml.Node, example string) ([]*yaml.Node, bool) {
	if n == nil || n.Kind != yaml.SequenceNode {
		c.errorf(n, RuleTypeInvalid, "%s: expected a list like %s, got %s", field, example, show(n))
		return nil, false
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		out[i] = resolve(e)
	}
	return out, true
}

// parsePolicy checks an x-idempotency mapping field by field.
func (c *checker) parsePolicy(m *yaml.Node) *rawPolicy {
	p := &rawPolicy{}
	const f = "x-idempotency"
	for _, kv := range pairs(m) {
		k, v := kv[0], kv[1]
		name := f + "." + k.Value
		switch k.Value {
		case "storage":
			if s, ok := c.str(name, v); ok {
				switch s {
				case "response", "reference", "marker":
					p.storage = set(s, v)
				default:
					c.errorf(v, RuleStorageInvalid, "%s: %q is not a storage mode (use response, reference or marker)", name, s)
				}
			}
		case "claim":
			if s, ok := c.str(name, v); ok {
				switch s {
				case "lease", "transaction":
					p.claim = set(s, v)
				default:
					c.errorf(v, RuleClaimInvalid, "%s: %q is not a claim mode (use lease or transaction)", name, s)
				}
			}
		case "ttl", "lease", "wait", "timeout":
			d, ok := c.duration(name, v, k.Value == "wait")
			if ok {
				switch k.Value {
				case "ttl":
					p.ttl = set(d, v)
				case "lease":
					p.lease = set(d, v)
				case "timeout":
					p.timeout = set(d, v)
				default:
					p.wait = set(d, v)
				}
			}
		case "mismatchStatus":
			if !isScalar(v) || v.Tag != "!!int" {
				c.errorf(v, RuleTypeInvalid, "%s: expected a status code (422, 409 or 400), got %s", name, show(v))
				break
			}
			n, err := strconv.Atoi(v.Value)
			if err != nil || (n != 422 && n != 409 && n != 400) {
				c.errorf(v, RuleMismatchStatus, "%s: %s is not allowed (use 422, 409 or 400)", name, v.Value)
				break
			}
			p.mismatch = set(n, v)
		case "persist":
			p.persist = c.persist(name, v)
		case "scope":
			p.scope = c.scope(name, v)
		case "key":
			p.key = c.key(name, v)
		case "fingerprint":
			c.fingerprint(name, v, p)
		case "replayHeaders":
			p.replayHeaders = c.replayHeaders(name, v)
		default:
			c.unknown(k, f, policyFields)
		}
	}
	return p
}

func (c *checker) duration(field string, n *yaml.Node, zeroOK bool) (time.Duration, bool) {
	if !isScalar(n) || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float") {
		c.errorf(n, RuleDurationInvalid, "%s: %s is not a duration (use e.g. 24h or 3d)", field, show(n))
		return 0, false
	}
	d, err := model.ParseDuration(n.Value)
	if err != nil {
		c.errorf(n, RuleDurationInvalid, "%s: %q is not a duration (use e.g. 24h or 3d)", field, n.Value)
		return 0, false
	}
	if d < 0 || (d == 0 && !zeroOK) {
		want := "positive"
		if zeroOK {
			want = "zero or positive"
		}
		c.errorf(n, RuleDurationInvalid, "%s: %q must be %s (use e.g. 24h or 3d)", field, n.Value, want)
		return 0, false
	}
	return d, true
}

var (
	statusClass = regexp.MustCompile(`^[2-5][xX][xX]$`)
	statusCode  = regexp.MustCompile(`^[2-5][0-9][0-9]$`)
)

func (c *checker) persist(field string, n *yaml.Node) setting[[]string] {
	items, ok := c.list(field, n, "[2xx, 404]")
	if !ok {
		return setting[[]string]{}
	}
	if len(items) == 0 {
		c.errorf(n, RulePersistInvalid, "%s: an empty list stores nothing, so no retry would ever be replayed (list the outcomes to keep, e.g. [2xx, 4xx])", field)
		return setting[[]string]{}
	}
	var out []string
	seen := map[string]bool{}
	good := true
	for i, e := range items {
		name := fmt.Sprintf("%s[%d]", field, i)
		if !isScalar(e) || (e.Tag != "!!str" && e.Tag != "!!int") {
			c.errorf(e, RulePersistInvalid, "%s: %s is not a status class or code (use e.g. 2xx or 404)", name, show(e))
			good = false
			continue
		}
		v := strings.ToLower(e.Value)
		switch {
		case v == "408" || v == "425" || v == "429":
			c.errorf(e, RulePersistNeverStored, "%s: %s is never stored: it asks the client to retry, and a stored copy would answer every retry with it (remove it)", name, v)
			good = false
		case statusClass.MatchString(v) || statusCode.MatchString(v):
			if seen[v] {
				c.errorf(e, RulePersistInvalid, "%s: %s is listed twice (remove one)", name, v)
				good = false
				continue
			}
			seen[v] = true
			out = append(out, v)
		default:
			c.errorf(e, RulePersistInvalid, "%s: %s is not a status class or code (use 2xx, 3xx, 4xx, 5xx or a code from 200 to 599)", name, show(e))
			good = false
		}
	}
	if !good {
		return setting[[]string]{}
	}
	return set(out, n)
}

func (c *checker) scope(field string, n *yaml.Node) setting[[]scopeItem] {
	items, ok := c.list(field, n, "[tenant, operation]")
	if !ok {
		return setting[[]scopeItem]{}
	}
	out := []scopeItem{}
	seen := map[string]bool{}
	good := true
	for i, e := range items {
		name := fmt.Sprintf("%s[%d]", field, i)
		if !isScalar(e) || e.Tag != "!!str" {
			c.errorf(e, RuleScopeInvalid, "%s: %s is not a scope item (use tenant, operation, header:<Name> or path:<param>)", name, show(e))
			good = false
			continue
		}
		it := scopeItem{node: e}
		kind, arg, hasArg := strings.Cut(e.Value, ":")
		switch {
		case !hasArg && (kind == "tenant" || kind == "operation"):
			it.kind = kind
		case hasArg && kind == "header" && isToken(arg):
			it.kind, it.name = kind, arg
		case hasArg && kind == "path" && arg != "":
			it.kind, it.name = kind, arg
		default:
			c.errorf(e, RuleScopeInvalid, "%s: %q is not a scope item (use tenant, operation, header:<Name> or path:<param>)", name, e.Value)
			good = false
			continue
		}
		id := it.kind + ":" + strings.ToLower(it.name)
		if seen[id] {
			c.errorf(e, RuleScopeInvalid, "%s: %q is listed twice (remove one)", name, e.Value)
			good = false
			continue
		}
		seen[id] = true
		out = append(out, it)
	}
	if !good {
		return setting[[]scopeItem]{}
	}
	return set(out, n)
}

func (c *checker) key(field string, n *yaml.Node) rawKey {
	var k rawKey
	if n == nil || n.Kind != yaml.MappingNode {
		c.errorf(n, RuleTypeInvalid, "%s: expected a mapping like {header: Idempotency-Key}, got %s", field, show(n))
		return k
	}
	for _, kv := range pairs(n) {
		kn, v := kv[0], kv[1]
		name := field + "." + kn.Value
		switch kn.Value {
		case "header":
			if s, ok := c.str(name, v); ok {
				if !isToken(s) {
					c.errorf(v, RuleKeyInvalid, "%s: %q is not a valid header name", name, s)
					break
				}
				k.header = set(s, v)
			}
		case "from":
			if s, ok := c.str(name, v); ok {
				param, found := strings.CutPrefix(s, "path:")
				if !found || param == "" {
					c.errorf(v, RuleKeyInvalid, "%s: %q is not a key source (use path:<param>, or key.header for a header)", name, s)
					break
				}
				k.from = set(param, v)
			}
		case "required":
			if !isScalar(v) || v.Tag != "!!bool" {
				c.errorf(v, RuleTypeInvalid, "%s: expected true or false, got %s", name, show(v))
				break
			}
			k.required = set(v.Value == "true", v)
		case "maxLength":
			if !isScalar(v) || v.Tag != "!!int" {
				c.errorf(v, RuleTypeInvalid, "%s: expected a number, got %s", name, show(v))
				break
			}
			ml, err := strconv.Atoi(v.Value)
			if err != nil || ml < 1 || ml > maxKeyLength {
				c.errorf(v, RuleKeyMaxLength, "%s: %s is out of range (use 1 to %d)", name, v.Value, maxKeyLength)
				break
			}
			k.maxLength = set(ml, v)
		case "pattern":
			if s, ok := c.str(name, v); ok {
				if _, err := regexp.Compile(s); err != nil {
					c.errorf(v, RuleKeyPatternInvalid, "%s: %q is not a valid RE2 regular expression: %v", name, s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
					break
				}
				k.pattern = set(s, v)
			}
		default:
			c.unknown(kn, field, keyFields)
		}
	}
	if k.header.ok && k.from.ok {
		c.errorf(k.from.node, RuleKeyConflict, "%s: has both header and from; a key comes from one place (keep one)", field)
		k.header, k.from = setting[string]{}, setting[string]{}
	}
	if k.from.ok && k.required.ok && !k.required.v {
		c.errorf(k.required.node, RuleKeyInvalid, "%s.required: a path parameter is always present, so a path key cannot be optional (remove required)", field)
	}
	return k
}

func (c *checker) fingerprint(field string, n *yaml.Node, p *rawPolicy) {
	switch {
	case isScalar(n) && n.Tag == "!!bool":
		p.fingerprint = set(n.Value == "true", n)
	case n != nil && n.Kind == yaml.MappingNode:
		p.fingerprint = set(true, n)
		for _, kv := range pairs(n) {
			k, v := kv[0], kv[1]
			if k.Value != "exclude" {
				c.unknown(k, field, []string{"exclude"})
				continue
			}
			name := field + ".exclude"
			items, ok := c.list(name, v, "[/metadata/requestTime, header:X-Request-Id]")
			if !ok {
				continue
			}
			out := []excludeItem{}
			seen := map[string]bool{}
			good := true
			for i, e := range items {
				en := fmt.Sprintf("%s[%d]", name, i)
				s, ok := c.str(en, e)
				if !ok {
					good = false
					continue
				}
				it, msg := parseExclude(s)
				if msg != "" {
					c.errorf(e, RuleFingerprintPointer, "%s: %s", en, msg)
					good = false
					continue
				}
				id := it.kind + ":" + it.name
				if it.kind == "header" {
					id = strings.ToLower(id)
				}
				if seen[id] {
					c.errorf(e, RuleFingerprintPointer, "%s: %q is listed twice (remove one)", en, s)
					good = false
					continue
				}
				seen[id] = true
				it.node = e
				out = append(out, it)
			}
			if good {
				p.exclude = set(out, v)
			}
		}
	default:
		c.errorf(n, RuleTypeInvalid, "%s: expected true, false or {exclude: [JSON pointers, header:<Name>, query:<name>]}, got %s", field, show(n))
	}
}

// parseExclude reads one fingerprint.exclude entry, or says what is wrong with it. An entry that
// starts with / is a JSON pointer; a <location>:<name> entry before any / names a parameter.
// Neither reading is ambiguous: a pointer always starts with /.
func parseExclude(s string) (excludeItem, string) {
	loc, name, isParam := strings.Cut(s, ":")
	if s == "" || s[0] == '/' || !isParam || strings.Contains(loc, "/") {
		if msg := checkPointer(s); msg != "" {
			return excludeItem{}, fmt.Sprintf("%q is not a JSON pointer: %s", s, msg)
		}
		return excludeItem{kind: "body", name: s}, ""
	}
	switch loc {
	case "header":
		if !isToken(name) {
			return excludeItem{}, fmt.Sprintf("%q is not header:<Name>: %q is not a valid header name", s, name)
		}
	case "query", "path":
		if name == "" {
			return excludeItem{}, fmt.Sprintf("%q names no parameter (use %s:<name>)", s, loc)
		}
	case "cookie":
		return excludeItem{}, fmt.Sprintf("%q: cookies are never part of the fingerprint, so there is nothing to exclude (remove it)", s)
	default:
		return excludeItem{}, fmt.Sprintf("%q is neither a JSON pointer into the body (/field) nor a parameter (header:<Name> or query:<name>)", s)
	}
	return excludeItem{kind: loc, name: name}, ""
}

// checkPointer validates an RFC 6901 JSON pointer and returns what is wrong, or "".
func checkPointer(s string) string {
	if s == "" {
		return "the empty pointer is the whole body, which would leave nothing to compare (name a field, e.g. /requestTime)"
	}
	if s[0] != '/' {
		return "it must start with / (e.g. /" + s + ")"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 == len(s) || (s[i+1] != '0' && s[i+1] != '1')) {
			return "~ must be escaped as ~0 (and / inside a name as ~1)"
		}
	}
	return ""
}

// forbiddenReplay are headers a replay must never carry: hop-by-hop headers belong to one
// connection, and credentials or cookies would leak one client's session to another retry.
var forbiddenReplay = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Set-Cookie": true, "Set-Cookie2": true, "Authorization": true,
}

func (c *checker) replayHeaders(field string, n *yaml.Node) setting[[]string] {
	items, ok := c.list(field, n, "[X-Request-Cost]")
	if !ok {
		return setting[[]string]{}
	}
	out := []string{}
	seen := map[string]bool{}
	good := true
	for i, e := range items {
		name := fmt.Sprintf("%s[%d]", field, i)
		s, ok := c.str(name, e)
		if !ok {
			good = false
			continue
		}
		canon := textproto.CanonicalMIMEHeaderKey(s)
		switch {
		case !isToken(s):
			c.errorf(e, RuleReplayHeaderInvalid, "%s: %q is not a valid header name", name, s)
			good = false
		case forbiddenReplay[canon]:
			c.errorf(e, RuleReplayHeaderDenied, "%s: %s is never replayed: it belongs to one connection or one client's credentials (remove it)", name, s)
			good = false
		case seen[canon]:
			c.errorf(e, RuleReplayHeaderInvalid, "%s: %s is listed twice (remove one)", name, s)
			good = false
		default:
			seen[canon] = true
			out = append(out, s)
		}
	}
	if !good {
		return setting[[]string]{}
	}
	return set(out, n)
}

// isToken reports whether s is an RFC 9110 token, the syntax of a header field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
