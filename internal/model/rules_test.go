package model

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

func TestClassifyMediaType(t *testing.T) {
	t.Parallel()
	for mt, want := range map[string]BodyKind{
		"application/json": BodyJSON, "application/json; charset=utf-8": BodyJSON,
		"application/merge-patch+json": BodyJSON, "application/*+json": BodyJSON,
		"application/x-www-form-urlencoded": BodyForm, "multipart/form-data": BodyMultipart,
		"multipart/mixed": BodyMultipart, "text/plain": BodyBytes, "application/octet-stream": BodyBytes,
		"not a media type;": BodyBytes,
	} {
		if got := ClassifyMediaType(mt); got != want {
			t.Errorf("ClassifyMediaType(%q) = %v; want %v", mt, got, want)
		}
	}
}
