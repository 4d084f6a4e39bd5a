package spec

import "testing"

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	config := []string{"version", "spec", "package", "output", "router", "allow-remote-refs", "oapi-codegen"}
	for _, tc := range []struct {
		word  string
		known []string
		want  string
	}{
		{"storrage", policyFields, "storage"},
		{"Storage", policyFields, "storage"},
		{"ttls", policyFields, "ttl"},
		{"tll", policyFields, "ttl"},
		{"mismatch-status", policyFields, "mismatchStatus"},
		{"replay_headers", policyFields, "replayHeaders"},
		{"ouput", config, "output"},
		{"pakage", config, "package"},
		{"allowRemoteRefs", config, "allow-remote-refs"},
		{"skip-prun", []string{"skip-fmt", "skip-prune"}, "skip-prune"},
		// Too far from anything: no guess.
		{"name", keyFields, ""},
		{"include", []string{"exclude"}, ""},
		{"expires", policyFields, ""},
		{"x", policyFields, ""},
		{"", policyFields, ""},
	} {
		if got := DidYouMean(tc.word, tc.known); got != tc.want {
			t.Errorf("DidYouMean(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}
