package idemhttp

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// DefaultMaxKeyLength is a key's longest length when KeyRule.MaxLength is zero.
const DefaultMaxKeyLength = 255

// KeyRule says where a key comes from and what a valid one looks like.
type KeyRule struct {
	Header    string // e.g. "Idempotency-Key"; empty when the key is a path parameter
	Required  bool
	MaxLength int            // default 255
	Pattern   *regexp.Regexp // optional
}

func (r KeyRule) name() string {
	if r.Header != "" {
		return r.Header + " header"
	}
	return "idempotency key"
}

func (r KeyRule) max() int {
	if r.MaxLength > 0 {
		return r.MaxLength
	}
	return DefaultMaxKeyLength
}

// ParseKey validates the key header values per rule (RFC 8941 quoted form accepted, exactly one
// header, printable ASCII, length, pattern). A nil Problem means key is valid; key == "" with a
// nil Problem means absent and not required.
//
// The key is an RFC 8941 sf-string, so `"abc"` and abc are the same key; escapes (\" and \\) are
// undone and any other malformed quoting is invalid. A bare (unquoted) value containing a comma is
// invalid: that is what two headers look like after a proxy folded them into one.
func ParseKey(values []string, rule KeyRule) (key string, p *Problem) {
	if len(values) == 0 {
		if rule.Required {
			return "", newProblem(400, CodeKeyMissing, fmt.Sprintf(
				"this operation requires an %s: send one with a unique value per logical request (max %d printable ASCII characters) and reuse it when you retry",
				rule.name(), rule.max()))
		}
		return "", nil
	}
	invalid := func(why string) (string, *Problem) {
		return "", newProblem(400, CodeKeyInvalid, fmt.Sprintf(
			"the %s %s: send exactly one, with a unique value per logical request (1 to %d printable ASCII characters, optionally as an RFC 8941 quoted string)",
			rule.name(), why, rule.max()))
	}
	if len(values) > 1 {
		return invalid(fmt.Sprintf("was sent %d times", len(values)))
	}
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		k, ok := unquoteSFString(v)
		if !ok {
			return invalid("is not a well-formed quoted string (only \\\" and \\\\ escapes, nothing after the closing quote)")
		}
		v = k
	} else if strings.Contains(v, ",") {
		return invalid("contains a comma outside quotes (two values folded into one header?)")
	}
	if v == "" {
		return invalid("is empty")
	}
	if len(v) > rule.max() {
		return invalid(fmt.Sprintf("is %d characters long", len(v)))
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return invalid(fmt.Sprintf("contains a character that is not printable ASCII at position %d", i+1))
		}
	}
	if rule.Pattern != nil && !rule.Pattern.MatchString(v) {
		return invalid(fmt.Sprintf("does not match the pattern %s", rule.Pattern))
	}
	return v, nil
}

// unquoteSFString parses an RFC 8941 sf-string (section 3.3.3): DQUOTE, printable ASCII with only
// \" and \\ escaped, DQUOTE, and nothing after it.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s) || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"':
			return b.String(), i == len(s)-1
		case c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return "", false // no closing quote
}

// KeyBindingProblem answers a request that oapi-codegen's parameter binding refused before the
// adapter saw it, when the refused parameter is the key header of the idempotent operation r
// is for: two key headers, or a value not of the header's declared type. It returns the
// key-invalid (or key-missing) problem every other malformed key gets, or nil when the error is
// about another parameter. param is the refused parameter's name; policies are the package's
// idempotent operations; r.Pattern, when the router set it (net/http's ServeMux does), picks the
// operation, else the first policy reading that header.
func KeyBindingProblem(policies []*Policy, r *http.Request, param string) *Problem {
	p := policyFor(policies, param, r.Pattern)
	if param == "" || p == nil {
		return nil
	}
	_, problem := ParseKey(r.Header.Values(param), p.Key)
	if problem == nil {
		// The key is well formed but could not be bound to the header's declared type: still a
		// key the operation cannot accept.
		_, problem = ParseKey([]string{""}, p.Key)
		problem.Detail = fmt.Sprintf("the %s is not of the type this operation declares for it: send one value per logical request, of that type", p.Key.name())
	}
	return problem
}

// policyFor returns the policy of the idempotent operation the router matched (pattern is
// http.Request.Pattern, which may carry a base URL) if it reads its key from header name.
// Without a pattern it falls back to the first policy reading that header.
func policyFor(policies []*Policy, name, pattern string) *Policy {
	pm, pp, routed := strings.Cut(pattern, " ")
	for _, p := range policies {
		if p.Key.Header == "" || !strings.EqualFold(p.Key.Header, name) {
			continue
		}
		if !routed {
			return p
		}
		method, path, _ := strings.Cut(p.Route, " ")
		if pm == method && strings.HasSuffix(pathShape(pp), pathShape(path)) {
			return p
		}
	}
	return nil
}

// pathShape blanks path wildcards: a ServeMux pattern names them after Go identifiers, the spec
// as written.
func pathShape(path string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '{')
		j := strings.IndexByte(path[max(i, 0):], '}')
		if i < 0 || j < 0 {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i+1])
		path = path[i+j:]
	}
}
