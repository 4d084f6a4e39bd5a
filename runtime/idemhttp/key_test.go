package idemhttp_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/runtime/idemhttp"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	req := idemhttp.KeyRule{Header: "Idempotency-Key", Required: true}
	tests := []struct {
		name   string
		values []string
		rule   idemhttp.KeyRule
		want   string
		code   string // "" means valid
	}{
		{"bare", []string{"abc-123"}, req, "abc-123", ""},
		{"quoted equals bare", []string{`"abc-123"`}, req, "abc-123", ""},
		{"quoted with escapes", []string{`"a\"b\\c"`}, req, `a"b\c`, ""},
		{"quoted may hold a comma", []string{`"a,b"`}, req, "a,b", ""},
		{"surrounding blanks are not part of the key", []string{" \tabc "}, req, "abc", ""},
		{"inner space is printable", []string{"a b"}, req, "a b", ""},
		{"missing and required", nil, req, "", idemhttp.CodeKeyMissing},
		{"missing and optional", nil, idemhttp.KeyRule{Header: "Idempotency-Key"}, "", ""},
		{"empty", []string{""}, req, "", idemhttp.CodeKeyInvalid},
		{"empty quoted", []string{`""`}, req, "", idemhttp.CodeKeyInvalid},
		{"two headers", []string{"a", "b"}, req, "", idemhttp.CodeKeyInvalid},
		{"two headers, same value", []string{"a", "a"}, req, "", idemhttp.CodeKeyInvalid},
		{"folded headers", []string{"a, b"}, req, "", idemhttp.CodeKeyInvalid},
		{"unterminated quote", []string{`"abc`}, req, "", idemhttp.CodeKeyInvalid},
		{"text after closing quote", []string{`"abc"x`}, req, "", idemhttp.CodeKeyInvalid},
		{"sf parameters are not a key", []string{`"abc";a=1`}, req, "", idemhttp.CodeKeyInvalid},
		{"bad escape", []string{`"a\nb"`}, req, "", idemhttp.CodeKeyInvalid},
		{"control character", []string{"a\x01b"}, req, "", idemhttp.CodeKeyInvalid},
		{"non-ASCII", []string{"clé"}, req, "", idemhttp.CodeKeyInvalid},
		{"non-ASCII quoted", []string{"\"clé\""}, req, "", idemhttp.CodeKeyInvalid},
		{"255 is the default limit", []string{strings.Repeat("k", 255)}, req, strings.Repeat("k", 255), ""},
		{"256 is too long", []string{strings.Repeat("k", 256)}, req, "", idemhttp.CodeKeyInvalid},
		{"quotes do not count towards the length", []string{`"` + strings.Repeat("k", 255) + `"`}, req, strings.Repeat("k", 255), ""},
		{"custom limit", []string{"abcdef"}, idemhttp.KeyRule{Required: true, MaxLength: 5}, "", idemhttp.CodeKeyInvalid},
		{"pattern ok", []string{"0b0e8b2a-7f5e-4c4e-9d1a-3f2b6c7d8e9f"}, idemhttp.KeyRule{Required: true, Pattern: uuid}, "0b0e8b2a-7f5e-4c4e-9d1a-3f2b6c7d8e9f", ""},
		{"pattern fails", []string{"not-a-uuid"}, idemhttp.KeyRule{Required: true, Pattern: uuid}, "", idemhttp.CodeKeyInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, p := idemhttp.ParseKey(tt.values, tt.rule)
			if tt.code == "" {
				if p != nil || got != tt.want {
					t.Fatalf("ParseKey(%q) = %q, %+v; want %q, no problem", tt.values, got, p, tt.want)
				}
				return
			}
			if p == nil {
				t.Fatalf("ParseKey(%q) = %q, no problem; want problem %s", tt.values, got, tt.code)
			}
			if p.Code != tt.code || p.Status != 400 || p.Type != "urn:idemgen:problem:"+tt.code || p.Title == "" || got != "" {
				t.Fatalf("ParseKey(%q) = %q, %+v; want a 400 %s problem", tt.values, got, p, tt.code)
			}
			if !strings.Contains(p.Detail, "Idempotency-Key") && tt.rule.Header != "" {
				t.Errorf("detail %q does not name the header", p.Detail)
			}
		})
	}
}

// quoteSF renders s as an RFC 8941 sf-string.
func quoteSF(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "a,b", `"a,b"`, "", " x ", "\x00", "clé", `"`, `\`, `"\`, strings.Repeat("z", 300), "ÿ"} {
		f.Add(s, 0)
	}
	f.Fuzz(func(t *testing.T, v string, max int) {
		rule := idemhttp.KeyRule{Header: "Idempotency-Key", Required: true, MaxLength: max % 300}
		key, p := idemhttp.ParseKey([]string{v}, rule)
		if (p == nil) == (key == "") {
			t.Fatalf("ParseKey(%q) = %q, %v: exactly one of key and problem must be set", v, key, p)
		}
		if p != nil {
			if p.Status != 400 || p.Code != idemhttp.CodeKeyInvalid {
				t.Fatalf("ParseKey(%q) problem = %+v; want 400 key-invalid", v, p)
			}
			return
		}
		limit := rule.MaxLength
		if limit <= 0 {
			limit = 255
		}
		if len(key) > limit {
			t.Fatalf("key %q longer than %d", key, limit)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("key %q has a non-printable byte", key)
			}
		}
		// The quoted form of a valid key is the same key.
		if q, p := idemhttp.ParseKey([]string{quoteSF(key)}, rule); p != nil || q != key {
			t.Fatalf("quoted form %s of %q parses as %q, %+v", quoteSF(key), key, q, p)
		}
		// A key is never accepted twice in one request.
		if _, p := idemhttp.ParseKey([]string{v, v}, rule); p == nil {
			t.Fatalf("two headers %q accepted", v)
		}
	})
}
