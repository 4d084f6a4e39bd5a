// Package lint renders spec diagnostics for `idemgen lint`: a line per finding for people, a
// stable JSON array for scripts, and SARIF 2.1.0 for code-scanning tools that show findings
// inline. The findings come from internal/spec, which reads the document, and their rules from
// package policy ([policy.Rules]), which owns x-idempotency.
package lint

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// Formats are the accepted --format values.
var Formats = []string{"text", "json", "sarif"}

// Write renders diags in format ("text", "json" or "sarif").
func Write(w io.Writer, format string, diags []spec.Diagnostic) error {
	switch format {
	case "text":
		return Text(w, diags)
	case "json":
		return JSON(w, diags)
	case "sarif":
		return SARIF(w, diags)
	}
	return fmt.Errorf("unknown format %q (use %s)", format, strings.Join(Formats, ", "))
}

// Text writes "file:line:col: severity: POST /x: message [rule]", one line per diagnostic.
func Text(w io.Writer, diags []spec.Diagnostic) error {
	for _, d := range diags {
		op := ""
		if d.Operation != "" {
			op = d.Operation + ": "
		}
		if _, err := fmt.Fprintf(w, "%s:%d:%d: %s: %s%s [%s]\n", d.Pos.File, d.Pos.Line, d.Pos.Col, d.Severity, op, d.Message, d.Rule); err != nil {
			return err
		}
	}
	return nil
}

// Summary is the one-line count printed after text output, e.g. "openapi.yaml: 2 errors, 1 warning".
func Summary(file string, diags []spec.Diagnostic) string {
	var errs, warns int
	for _, d := range diags {
		if d.Severity == policy.SeverityError {
			errs++
		} else {
			warns++
		}
	}
	if errs+warns == 0 {
		return file + ": no findings"
	}
	return fmt.Sprintf("%s: %s, %s", file, plural(errs, "error"), plural(warns, "warning"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// jsonDiagnostic is the JSON form; its field names are a public interface, so they do not follow
// the Go struct.
type jsonDiagnostic struct {
	File      string `json:"file"`
	Line      int    `json:"line"`
	Column    int    `json:"column"`
	Severity  string `json:"severity"`
	Rule      string `json:"rule"`
	Operation string `json:"operation"`
	Message   string `json:"message"`
}

// JSON writes an array of diagnostics (an empty array when there are none), indented, in the
// order given.
func JSON(w io.Writer, diags []spec.Diagnostic) error {
	out := make([]jsonDiagnostic, 0, len(diags))
	for _, d := range diags {
		out = append(out, jsonDiagnostic{
			File: d.Pos.File, Line: d.Pos.Line, Column: d.Pos.Col,
			Severity: string(d.Severity), Rule: d.Rule, Operation: d.Operation, Message: d.Message,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

// SARIFSchema is the URI of the official SARIF 2.1.0 schema, written into every log.
const SARIFSchema = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool       sarifTool     `json:"tool"`
	ColumnKind string        `json:"columnKind"`
	Results    []sarifResult `json:"results"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name  string      `json:"name"`
	Rules []sarifRule `json:"rules"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifRule struct {
	ID                   string      `json:"id"`
	ShortDescription     sarifText   `json:"shortDescription"`
	DefaultConfiguration sarifConfig `json:"defaultConfiguration"`
}

type sarifConfig struct {
	Level string `json:"level"`
}

type sarifResult struct {
	RuleID    string          `json:"ruleId"`
	RuleIndex int             `json:"ruleIndex"`
	Level     string          `json:"level"`
	Message   sarifText       `json:"message"`
	Locations []sarifLocation `json:"locations"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical `json:"physicalLocation"`
}

type sarifPhysical struct {
	ArtifactLocation sarifArtifact `json:"artifactLocation"`
	Region           *sarifRegion  `json:"region,omitempty"`
}

type sarifArtifact struct {
	URI string `json:"uri"`
}

type sarifRegion struct {
	StartLine   int `json:"startLine"`
	StartColumn int `json:"startColumn,omitempty"`
}

// SARIF writes a SARIF 2.1.0 log with one run. Every rule idemgen has is listed in the driver,
// so a code-scanning tool knows the rule set even when the run is clean. The operation is part of
// the message text, since SARIF has no field for it that viewers show.
func SARIF(w io.Writer, diags []spec.Diagnostic) error {
	rules := policy.Rules()
	index := map[string]int{}
	run := sarifRun{
		Tool:       sarifTool{Driver: sarifDriver{Name: "idemgen", Rules: []sarifRule{}}},
		ColumnKind: "unicodeCodePoints", // yaml.v3 counts columns in characters
		Results:    []sarifResult{},
	}
	for i, r := range rules {
		index[r.ID] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{
			ID:                   r.ID,
			ShortDescription:     sarifText{Text: r.Summary},
			DefaultConfiguration: sarifConfig{Level: string(r.Severity)},
		})
	}
	for _, d := range diags {
		text := d.Message
		if d.Operation != "" {
			text = d.Operation + ": " + text
		}
		loc := sarifPhysical{ArtifactLocation: sarifArtifact{URI: artifactURI(d.Pos.File)}}
		if d.Pos.Line > 0 {
			loc.Region = &sarifRegion{StartLine: d.Pos.Line, StartColumn: d.Pos.Col}
		}
		run.Results = append(run.Results, sarifResult{
			RuleID:    d.Rule,
			RuleIndex: index[d.Rule],
			Level:     string(d.Severity),
			Message:   sarifText{Text: text},
			Locations: []sarifLocation{{PhysicalLocation: loc}},
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(sarifLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}

// artifactURI turns a file path into a URI reference: relative paths stay relative (code-scanning
// tools resolve them against the repository root), absolute ones become file URIs.
func artifactURI(p string) string {
	slash := filepath.ToSlash(p)
	if filepath.IsAbs(p) {
		if !strings.HasPrefix(slash, "/") {
			slash = "/" + slash // a Windows drive path
		}
		return (&url.URL{Scheme: "file", Path: slash}).String()
	}
	return (&url.URL{Path: slash}).String()
}
