package policy

import (
	"fmt"
	"math"
	"net/textproto"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemwire"
)

// Finding is a value that breaks a rule: the rule's id and a message that says what is wrong
// and what to do, without the field's name (the caller names the field its own way:
// x-idempotency.storage in a spec, --storage on annotate's command line). It is a compile-time
// finding, not the RFC 9457 problem a server answers (idemhttp.Problem).
type Finding struct {
	Rule string
	Msg  string
}

func (p *Finding) Error() string { return p.Msg }

func finding(rule, format string, args ...any) *Finding {
	return &Finding{Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

// ItemFinding is a Finding about one item of a list; Index is the item's place in the list
// given, or -1 for the list as a whole.
type ItemFinding struct {
	Index int
	*Finding
}

// ParseStorage reads a storage mode.
func ParseStorage(s string) (StorageMode, *Finding) {
	if slices.Contains(Storages, StorageMode(s)) {
		return StorageMode(s), nil
	}
	return "", finding(RuleStorageInvalid, "%q is not a storage mode (use response, reference or marker)", s)
}

// ParseClaim reads a claim mode.
func ParseClaim(s string) (ClaimMode, *Finding) {
	if slices.Contains(Claims, ClaimMode(s)) {
		return ClaimMode(s), nil
	}
	return "", finding(RuleClaimInvalid, "%q is not a claim mode (use lease or transaction)", s)
}

// ParseMismatchStatus checks a mismatchStatus.
func ParseMismatchStatus(n int) (int, *Finding) {
	if slices.Contains(MismatchStatuses, n) {
		return n, nil
	}
	return 0, finding(RuleMismatchStatus, "%d is not allowed (use 422, 409 or 400)", n)
}

// ParseDurationField reads the value of ttl, lease, timeout (positive) or wait (zero or more).
func ParseDurationField(field, s string) (time.Duration, *Finding) {
	d, err := ParseDuration(s)
	if err != nil {
		return 0, finding(RuleDurationInvalid, "%q is not a duration (use e.g. 24h or 3d)", s)
	}
	zeroOK := field == "wait"
	if d < 0 || (d == 0 && !zeroOK) {
		want := "positive"
		if zeroOK {
			want = "zero or positive"
		}
		return 0, finding(RuleDurationInvalid, "%q must be %s (use e.g. 24h or 3d)", s, want)
	}
	return d, nil
}

// ParseDuration reads a Go duration, or a number of days with "d" optionally followed by a Go
// duration ("3d", "1d12h"): days are what people write for a ttl, and Go has no unit for
// them. A negative value parses (callers say whether it is allowed); one past the range of
// time.Duration does not.
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration (use e.g. 24h, 90s or 3d)", s)
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(24*time.Hour) {
			return 0, bad
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || (days > 0 && (d < 0 || d > math.MaxInt64-days)) {
		return 0, bad
	}
	return days + d, nil
}

// FormatDuration prints a duration the way people write one: 2m, 1h30m, 3d, not 2m0s.
func FormatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

var (
	statusClass = regexp.MustCompile(`^[2-5][xX][xX]$`)
	statusCode  = regexp.MustCompile(`^[2-5][0-9][0-9]$`)
)

// ParsePersist reads a persist list: status classes (2xx..5xx, lower-cased) and codes
// (200..599), never 408, 425 or 429, none twice, not empty.
func ParsePersist(items []string) ([]string, []ItemFinding) {
	if len(items) == 0 {
		return nil, []ItemFinding{{-1, finding(RulePersistInvalid, "an empty list stores nothing, so no retry would ever be replayed (list the outcomes to keep, e.g. [2xx, 4xx])")}}
	}
	return parseList(items, func(s string) (string, string, *Finding) {
		v := strings.ToLower(s)
		switch {
		case v == "408" || v == "425" || v == "429":
			return "", "", finding(RulePersistNeverStored, "%s is never stored: it asks the client to retry, and a stored copy would answer every retry with it (remove it)", v)
		case statusClass.MatchString(v) || statusCode.MatchString(v):
			return v, v, nil
		}
		shown := s
		if _, err := strconv.Atoi(s); err != nil {
			shown = strconv.Quote(s)
		}
		return "", "", finding(RulePersistInvalid, "%s is not a status class or code (use 2xx, 3xx, 4xx, 5xx or a code from 200 to 599)", shown)
	}, func(s string) *Finding {
		return finding(RulePersistInvalid, "%s is listed twice (remove one)", strings.ToLower(s))
	})
}

// parseList reads items with parse, which also returns the identity an item is compared by: an
// item whose identity an earlier one had is the problem twice returns. The items accepted keep
// their order.
func parseList[T any](items []string, parse func(string) (T, string, *Finding), twice func(string) *Finding) ([]T, []ItemFinding) {
	out := []T{}
	var probs []ItemFinding
	seen := map[string]bool{}
	for i, s := range items {
		v, id, p := parse(s)
		switch {
		case p != nil:
			probs = append(probs, ItemFinding{i, p})
		case seen[id]:
			probs = append(probs, ItemFinding{i, twice(s)})
		default:
			seen[id] = true
			out = append(out, v)
		}
	}
	return out, probs
}

// ParseScopeItem reads one scope item: tenant, operation, header:<Name> (a header name) or
// path:<param> (any non-empty name).
func ParseScopeItem(s string) (ScopeItem, *Finding) {
	kind, arg, hasArg := strings.Cut(s, ":")
	switch {
	case !hasArg && (kind == ScopeTenant || kind == ScopeOperation):
		return ScopeItem{Kind: kind}, nil
	case hasArg && kind == ScopeHeader && IsToken(arg):
		return ScopeItem{Kind: kind, Name: arg}, nil
	case hasArg && kind == ScopePath && arg != "":
		return ScopeItem{Kind: kind, Name: arg}, nil
	}
	return ScopeItem{}, ScopeItemInvalid(strconv.Quote(s))
}

// ScopeItemInvalid is the problem of a scope item that is none of the four kinds; shown is the
// item as the reader wrote it.
func ScopeItemInvalid(shown string) *Finding {
	return finding(RuleScopeInvalid, "%s is not a scope item (use tenant, operation, header:<Name> or path:<param>)", shown)
}

// ParseScope reads a scope list; an item listed twice (header names compared
// case-insensitively) is a problem.
func ParseScope(items []string) ([]ScopeItem, []ItemFinding) {
	return parseList(items, func(s string) (ScopeItem, string, *Finding) {
		it, p := ParseScopeItem(s)
		return it, it.Kind + ":" + strings.ToLower(it.Name), p
	}, func(s string) *Finding { return finding(RuleScopeInvalid, "%q is listed twice (remove one)", s) })
}

// ParseKeyHeader checks key.header.
func ParseKeyHeader(s string) (string, *Finding) {
	if !IsToken(s) {
		return "", finding(RuleKeyInvalid, "%q is not a valid header name", s)
	}
	return s, nil
}

// ParseKeyFrom reads key.from, path:<param>, into the parameter's name.
func ParseKeyFrom(s string) (string, *Finding) {
	param, found := strings.CutPrefix(s, "path:")
	if !found || param == "" {
		return "", finding(RuleKeyInvalid, "%q is not a key source (use path:<param>, or key.header for a header)", s)
	}
	return param, nil
}

// ParseKeyMaxLength checks key.maxLength, written as text.
func ParseKeyMaxLength(s string) (int, *Finding) {
	ml, err := strconv.Atoi(s)
	if err != nil || ml < 1 || ml > MaxKeyLength {
		return 0, finding(RuleKeyMaxLength, "%s is out of range (use 1 to %d)", s, MaxKeyLength)
	}
	return ml, nil
}

// ParseKeyPattern checks key.pattern, an RE2 regular expression.
func ParseKeyPattern(s string) (string, *Finding) {
	if _, err := regexp.Compile(s); err != nil {
		return "", finding(RuleKeyPatternInvalid, "%q is not a valid RE2 regular expression: %v", s, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return s, nil
}

// Exclusion kinds of a fingerprint.exclude entry.
const (
	ExcludeBody   = "body"   // a JSON pointer into the body
	ExcludeHeader = "header" // header:<Name>
	ExcludeQuery  = "query"  // query:<name>
	ExcludePath   = "path"   // path:<name>, which parses so that Resolve can say why it is refused
)

// ExcludeItem is one fingerprint.exclude entry.
type ExcludeItem struct {
	Kind string // ExcludeBody, ExcludeHeader, ExcludeQuery or ExcludePath
	Name string // the pointer, or the parameter's name
}

// ParseExcludes reads fingerprint.exclude; an entry listed twice is a problem.
func ParseExcludes(items []string) ([]ExcludeItem, []ItemFinding) {
	return parseList(items, func(s string) (ExcludeItem, string, *Finding) {
		it, msg := parseExclude(s)
		if msg != "" {
			return it, "", finding(RuleFingerprintPointer, "%s", msg)
		}
		id := it.Kind + ":" + it.Name
		if it.Kind == ExcludeHeader {
			id = strings.ToLower(id)
		}
		return it, id, nil
	}, func(s string) *Finding { return finding(RuleFingerprintPointer, "%q is listed twice (remove one)", s) })
}

// parseExclude reads one fingerprint.exclude entry, or says what is wrong with it. An entry that
// starts with / is a JSON pointer; a <location>:<name> entry before any / names a parameter.
// Neither reading is ambiguous: a pointer always starts with /.
func parseExclude(s string) (ExcludeItem, string) {
	loc, name, isParam := strings.Cut(s, ":")
	if s == "" || s[0] == '/' || !isParam || strings.Contains(loc, "/") {
		if msg := checkPointer(s); msg != "" {
			return ExcludeItem{}, fmt.Sprintf("%q is not a JSON pointer: %s", s, msg)
		}
		return ExcludeItem{Kind: ExcludeBody, Name: s}, ""
	}
	switch loc {
	case ExcludeHeader:
		if !IsToken(name) {
			return ExcludeItem{}, fmt.Sprintf("%q is not header:<Name>: %q is not a valid header name", s, name)
		}
	case ExcludeQuery, ExcludePath:
		if name == "" {
			return ExcludeItem{}, fmt.Sprintf("%q names no parameter (use %s:<name>)", s, loc)
		}
	case "cookie":
		return ExcludeItem{}, fmt.Sprintf("%q: cookies are never part of the fingerprint, so there is nothing to exclude (remove it)", s)
	default:
		return ExcludeItem{}, fmt.Sprintf("%q is neither a JSON pointer into the body (/field) nor a parameter (header:<Name> or query:<name>)", s)
	}
	return ExcludeItem{Kind: loc, Name: name}, ""
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

// NeverReplayedWhy says why a replay never carries the header name, or "" when it may: the
// runtime's list ([idemhttp.NeverReplayed]) decides, and this only explains it.
func NeverReplayedWhy(name string) string {
	if !idemhttp.NeverReplayed(name) {
		return ""
	}
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "Set-Cookie", "Set-Cookie2", "Cookie", "Authorization", "Proxy-Authorization", "Www-Authenticate", "Proxy-Authenticate":
		return "it carries one client's credentials or session, which a stored answer must not hand to whoever retries the key"
	case "Content-Length":
		return "the server computes it from the replayed body"
	case textproto.CanonicalMIMEHeaderKey(idemwire.HeaderReplayed):
		return "the runtime sets it itself on every replay"
	}
	return "it is a hop-by-hop header, which belongs to one connection, not to the outcome"
}

// MissingOnReplay says why a replay lacks the header name that the first answer had, or "" when
// a replay has it: Content-Length and Idempotent-Replayed are never copied from the stored answer,
// but a replay carries them all the same (computed from the body, set by the runtime).
func MissingOnReplay(name string) string {
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "Content-Length", textproto.CanonicalMIMEHeaderKey(idemwire.HeaderReplayed):
		return ""
	}
	return NeverReplayedWhy(name)
}

// ParseReplayHeaders reads replayHeaders: header names, none hop-by-hop or a credential, none
// twice.
func ParseReplayHeaders(items []string) ([]string, []ItemFinding) {
	return parseList(items, func(s string) (string, string, *Finding) {
		canon := textproto.CanonicalMIMEHeaderKey(s)
		switch {
		case !IsToken(s):
			return "", "", finding(RuleReplayHeaderInvalid, "%q is not a valid header name", s)
		case NeverReplayedWhy(canon) != "":
			return "", "", finding(RuleReplayHeaderDenied, "%s is never replayed: %s (remove it)", s, NeverReplayedWhy(canon))
		}
		return s, canon, nil
	}, func(s string) *Finding { return finding(RuleReplayHeaderInvalid, "%s is listed twice (remove one)", s) })
}

// IsToken reports whether s is an RFC 9110 token, the syntax of a header field name.
func IsToken(s string) bool {
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

func equalFold(a, b string) bool { return strings.EqualFold(a, b) }

// KeyLikeRank says how much a header name looks like an idempotency key: 2 for Idempotency-Key
// in any spelling or prefix (idempotency-key, X-Idempotency-Key, Acme-Idempotency-Token), 1 for a
// vendor's request id (PayPal-Request-Id), 0 for anything else. X-Request-Id and Request-Id are
// the common tracing headers, not keys.
func KeyLikeRank(name string) int {
	l := strings.ToLower(name)
	switch {
	case strings.Contains(l, "idempoten"):
		return 2
	case strings.HasSuffix(l, "-request-id") && l != "x-request-id":
		return 1
	}
	return 0
}

// ParseRenderer reads renderer: problem (the default) or custom.
func ParseRenderer(s string) (string, *Finding) {
	if s == RendererProblem || s == RendererCustom {
		return s, nil
	}
	return "", finding(RuleRendererInvalid, "%q is not a renderer (use problem for RFC 9457 problems, or custom when the server's idemhttp.Renderer answers refusals in the API's own error format)", s)
}

// ParseIncludes reads fingerprint.include: header:<Name> entries, none twice.
func ParseIncludes(items []string) ([]ExcludeItem, []ItemFinding) {
	return parseList(items, func(s string) (ExcludeItem, string, *Finding) {
		name, ok := strings.CutPrefix(s, "header:")
		if !ok || !IsToken(name) {
			return ExcludeItem{}, "", finding(RuleFingerprintPointer, "%q is not header:<Name>: only headers the default fingerprint leaves out can be included", s)
		}
		return ExcludeItem{Kind: ExcludeHeader, Name: name}, strings.ToLower(name), nil
	}, func(s string) *Finding { return finding(RuleFingerprintPointer, "%q is listed twice (remove one)", s) })
}

// ParseEchoHeaders reads echoHeaders: header names, none a credential or hop-by-hop header (a
// replay would hand the request's Authorization back), none twice.
func ParseEchoHeaders(items []string) ([]string, []ItemFinding) {
	return parseList(items, func(s string) (string, string, *Finding) {
		canon := textproto.CanonicalMIMEHeaderKey(s)
		switch {
		case !IsToken(s):
			return "", "", finding(RuleReplayHeaderInvalid, "%q is not a valid header name", s)
		case NeverReplayedWhy(canon) != "":
			return "", "", finding(RuleReplayHeaderDenied, "%s cannot be echoed: %s (remove it)", s, NeverReplayedWhy(canon))
		}
		return s, canon, nil
	}, func(s string) *Finding { return finding(RuleReplayHeaderInvalid, "%s is listed twice (remove one)", s) })
}
