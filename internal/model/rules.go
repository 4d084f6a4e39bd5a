package model

import (
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
)

// The x-idempotency rules every command shares: the built-in defaults (the runtime's own, so a
// generated policy and a zero runtime field mean the same), how durations are written, and
// which media types can be fingerprinted. spec, lint, annotate and generate all use these.

// Built-in defaults, applied under a document's root x-idempotency defaults.
const (
	DefaultStorage        = StorageResponse
	DefaultClaim          = ClaimLease
	DefaultTTL            = idem.DefaultTTL
	DefaultLease          = idem.DefaultLease
	DefaultWait           = time.Duration(0)
	DefaultMismatchStatus = idemhttp.DefaultMismatchStatus
	DefaultKeyHeader      = idemhttp.DefaultKeyHeader
	// MaxKeyLength is both the default and the ceiling of key.maxLength: a longer "key" is a
	// payload, not an identifier, and bounding it bounds the key column and its index.
	MaxKeyLength = idemhttp.DefaultMaxKeyLength
)

// DefaultScope and DefaultPersist are the scope and persist lists when none is written.
func DefaultScope() []string   { return []string{"tenant", "operation"} }
func DefaultPersist() []string { return append([]string(nil), idemhttp.DefaultPersist...) }

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

// ClassifyMediaType says how a request body of media type mt is fingerprinted, by the same rule
// the runtime applies to the Content-Type a request arrives with (idem.CanonicalBody): JSON
// (application/json and *+json) canonically, forms field by field, multipart part by part, and
// anything else as bytes.
func ClassifyMediaType(mt string) BodyKind {
	base, _, err := mime.ParseMediaType(mt)
	switch {
	case err != nil:
		return BodyBytes
	case base == "application/json" || strings.HasSuffix(base, "+json"):
		return BodyJSON
	case base == "application/x-www-form-urlencoded":
		return BodyForm
	case strings.HasPrefix(base, "multipart/"):
		return BodyMultipart
	}
	return BodyBytes
}
