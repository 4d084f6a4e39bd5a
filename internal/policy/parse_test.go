package policy

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"24h": 24 * time.Hour, "3d": 72 * time.Hour, "1d12h": 36 * time.Hour, "90s": 90 * time.Second,
		"0s": 0, "1.5h": 90 * time.Minute, "-5s": -5 * time.Second,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "5x", "d", "xd", "1d5x", "3days", "1d-5h", "99999999999999d", "106751d24h", "12", "-d", "-1d"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v; want an error", in, got)
		}
	}
}

func TestFormatDurationRoundTrips(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		24 * time.Hour: "1d", 72 * time.Hour: "3d", 90 * time.Second: "1m30s", 2 * time.Minute: "2m",
		90 * time.Minute: "1h30m", 0: "0s", 36 * time.Hour: "36h",
	} {
		got := FormatDuration(d)
		if got != want {
			t.Errorf("FormatDuration(%v) = %q; want %q", d, got, want)
		}
		if back, err := ParseDuration(got); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	}
}

func TestParseExclude(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]ExcludeItem{
		"/a":            {Kind: "body", Name: "/a"},
		"/header:x":     {Kind: "body", Name: "/header:x"}, // a body field whose name has a colon
		"/a/b:c":        {Kind: "body", Name: "/a/b:c"},
		"header:X-Id":   {Kind: "header", Name: "X-Id"},
		"query:since":   {Kind: "query", Name: "since"},
		"query:a:b":     {Kind: "query", Name: "a:b"},
		"path:order_id": {Kind: "path", Name: "order_id"},
	} {
		got, msg := parseExclude(in)
		if msg != "" || got != want {
			t.Errorf("parseExclude(%q) = %+v, %q; want %+v", in, got, msg, want)
		}
	}
	for _, in := range []string{"", "a", "a/b:c", "header:", "header:a b", "query:", "path:", "cookie:s", "Header:X-Id", "body:/a"} {
		if got, msg := parseExclude(in); msg == "" {
			t.Errorf("parseExclude(%q) = %+v; want an error", in, got)
		}
	}
}

func TestKeyLikeRank(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]int{
		"Idempotency-Key": 2, "idempotency-key": 2, "X-Idempotency-Key": 2, "Acme-Idempotency-Key": 2,
		"PayPal-Request-Id": 1, "X-Request-Id": 0, "Request-Id": 0, "Authorization": 0,
	} {
		if got := KeyLikeRank(name); got != want {
			t.Errorf("KeyLikeRank(%q) = %d, want %d", name, got, want)
		}
	}
}
