package idem

import (
	"fmt"
	"regexp"
	"strings"
)

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
