// Package sariftest validates idemgen's SARIF output in tests, for every package that produces it.
package sariftest

import (
	_ "embed"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// subset is a hand-written subset of the official SARIF 2.1.0 schema (required properties,
// enums, minimums, formats, additionalProperties:false for the objects idemgen writes): the full
// schema cannot be downloaded here.
//
//go:embed sarif-2.1.0-subset.json
var subset string

// Schema compiles the SARIF 2.1.0 subset.
func Schema(tb testing.TB) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(subset))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("sarif-2.1.0-subset.json", doc); err != nil {
		tb.Fatal(err)
	}
	sch, err := c.Compile("sarif-2.1.0-subset.json")
	if err != nil {
		tb.Fatal(err)
	}
	return sch
}
