package idemhttp

import "testing"

// TestNotTextFastPath: notText's one-comparison-per-byte pass answers as the full check does
// (notTextSlow), for ASCII, a NUL anywhere, multibyte UTF-8, and bytes that are not UTF-8.
func TestNotTextFastPath(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "k-1", "order 42/€", "\x00", "a\x00", "\x00a", "é", "aé\x00", "\xff", "a\xc3", "\xc3(", "日本",
		"\xed\xa0\x80", "a\x7f", "ok\xf4\x90\x80\x80",
	} {
		if got, want := notText(s), notTextSlow(s); got != want {
			t.Errorf("notText(%q) = %q, want %q", s, got, want)
		}
	}
	if notText("\x00") == "" || notText("a\xff") == "" || notText("plain") != "" {
		t.Error("notText lets a NUL or a byte that is not UTF-8 through, or refuses plain text")
	}
}
