package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// jsonFiles are the JSON documents of the repository: the corpus (Adyen's 0.9 MB among them),
// the golden cases, and the test inputs of annotate (minified, CRLF, tabs).
func jsonFiles(t testing.TB) []string {
	var files []string
	for _, pattern := range []string{
		"../../internal/annotate/testdata/corpus/*/*.json",
		"../../internal/annotate/testdata/specs/*.json",
		"../../testdata/*/openapi.json",
		"testdata/*/*.json",
		"testdata/*/*/*.json",
	} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 8 {
		t.Fatalf("found %d JSON documents, want the corpus and the test inputs: did they move?", len(files))
	}
	return files
}

// TestJSONNodesMatchSlowPath: on every JSON document of the repository and on documents made to
// reach each corner of JSON, jsonNodes builds the tree the slow path builds, node for node.
func TestJSONNodesMatchSlowPath(t *testing.T) {
	t.Parallel()
	docs := map[string]string{
		"characters before a value on its line": `{"a": "café ünïcödé €", "b": {"c": 1, "d": "日本語", "e": true}}`,
		"escapes yaml.v3 reads":                 `{"a": "line\nbreak \"quoted\" back\\slash \u00e9 \t tab", "b": "\u20ac"}`,
		"escapes only JSON reads":               `{"a": "a\/b", "b": "\ud83d\ude00", "c": "\ud800 lone"}`,
		"a key twice":                           "{\n  \"a\": 1,\n  \"a\": {\"b\": [1, 2]}\n}",
		"numbers":                               `{"n": [0, -0, 7, -12, 1.5, -0.25, 1e5, 1E+5, 2.5e-3, 9223372036854775807, -9223372036854775808]}`,
		"literals and empty collections":        `{"t": true, "f": false, "n": null, "o": {}, "l": [], "ll": [[], [{}], [[1]]]}`,
		"CRLF and tabs":                         "{\r\n\t\"a\": {\r\n\t\t\"b\": \"c\"\r\n\t},\r\n\t\"d\":\t[1,\t2]\r\n}\r\n",
		"no space at all":                       `{"paths":{"/a":{"post":{"x-idempotency":{"ttl":"1h","key":{"header":"K"}},"parameters":[{"name":"K","in":"header"}]}}}}`,
		"spaces around every token":             " \n {  \"a\"  :  [  1  ,  \"x\"  ]  ,  \"b\"  :  { }  } \n\n",
		"deep":                                  strings.Repeat(`{"a": [`, 100) + "1" + strings.Repeat("]}", 100),
	}
	for _, path := range jsonFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		docs[path] = string(b)
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, ok := jsonNodes([]byte(doc))
			if !ok {
				t.Fatalf("jsonNodes refused the document; it is JSON the slow path reads alike")
			}
			want, by, err := slowTree([]byte(doc))
			if err != nil {
				t.Fatalf("the slow path refuses it: %v", err)
			}
			if d := diffNodes(want, got, by == "yaml.v3", "$"); d != "" {
				t.Errorf("jsonNodes and %s differ: %s", by, d)
			}
		})
	}
}

// TestJSONNodesRefuses: what yaml.v3 reads otherwise than JSON does, and what is not JSON, goes to
// the slow path.
func TestJSONNodesRefuses(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"a byte order mark":             "\ufeff{\"a\": 1}",
		"a lone carriage return":        "{\"a\": 1,\r\"b\": 2}",
		"U+0085 in a string":            "{\"a\": \"x\u0085y\", \"b\": 2}",
		"U+2028 in a string":            "{\"a\": \"x\u2028y\", \"b\": 2}",
		"U+2029 in a string":            "{\"a\": \"x\u2029y\", \"b\": 2}",
		"an integer beyond int64":       `{"a": 9223372036854775808}`,
		"a number beyond float64":       `{"a": 1e400}`,
		"invalid UTF-8":                 "{\"a\": \"\xff\"}",
		"a raw tab in a string":         "{\"a\": \"x\ty\"}",
		"a raw newline in a string":     "{\"a\": \"x\ny\"}",
		"an unknown escape":             `{"a": "\q"}`,
		"a top-level list":              `[{"a": 1}]`,
		"data after the value":          `{"a": 1} {"b": 2}`,
		"a trailing comma":              `{"a": 1,}`,
		"a leading zero":                `{"a": 01}`,
		"a bare word":                   `{"a": yes}`,
		"single quotes":                 `{'a': 1}`,
		"a comment":                     "{\"a\": 1 # one\n}",
		"YAML":                          "openapi: 3.0.3\npaths: {}\n",
		"empty":                         "",
		"unterminated":                  `{"a": [1, 2`,
		"nesting deeper than the bound": strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2),
	} {
		if _, ok := jsonNodes([]byte(doc)); ok {
			t.Errorf("%s: jsonNodes read %q; it must leave it to the slow path", name, doc)
		}
	}
}

// FuzzJSONNodes: whatever jsonNodes reads, the slow path reads too, into the same tree.
func FuzzJSONNodes(f *testing.F) {
	for _, path := range jsonFiles(f) {
		if b, err := os.ReadFile(path); err == nil && len(b) < 8<<10 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"a": "\ud83d\ude00", "b": [1.5e3, -0, null], "c": {"d": "é"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := jsonNodes(data)
		if !ok {
			return
		}
		want, by, err := slowTree(data)
		if err != nil {
			t.Fatalf("jsonNodes read %q, which the slow path refuses: %v", data, err)
		}
		if d := diffNodes(want, got, by == "yaml.v3", "$"); d != "" {
			t.Fatalf("jsonNodes and %s differ on %q: %s", by, data, d)
		}
	})
}

// diffNodes describes the first difference between two trees in what the spec package reads
// (and, against yaml.v3, the style too; the token walker leaves it unset), or "".
func diffNodes(want, got *yaml.Node, style bool, at string) string {
	switch {
	case want == nil || got == nil:
		if want != got {
			return fmt.Sprintf("%s: want %v, got %v", at, want, got)
		}
		return ""
	case want.Kind != got.Kind, want.Tag != got.Tag, want.Value != got.Value,
		want.Line != got.Line, want.Column != got.Column, style && want.Style != got.Style,
		want.Anchor != got.Anchor, want.Alias != nil, got.Alias != nil,
		len(want.Content) != len(got.Content):
		return fmt.Sprintf("%s: want %s, got %s", at, describe(want), describe(got))
	}
	for i := range want.Content {
		if d := diffNodes(want.Content[i], got.Content[i], style, fmt.Sprintf("%s[%d]", at, i)); d != "" {
			return d
		}
	}
	return ""
}

func describe(n *yaml.Node) string {
	return fmt.Sprintf("{kind %d tag %s value %q at %d:%d style %d anchor %q alias %v, %d children}",
		n.Kind, n.Tag, n.Value, n.Line, n.Column, n.Style, n.Anchor, n.Alias != nil, len(n.Content))
}
