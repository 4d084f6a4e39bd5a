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

// Write renders diags in format ("text", "json" or "sarif"), then the acknowledged findings
// acked (pass none to leave them out).
func Write(w io.Writer, format string, diags []spec.Diagnostic, acked []spec.Acknowledged) error {
	switch format {
	case "text":
		if err := Text(w, diags); err != nil {
			return err
		}
		return TextAcknowledged(w, acked)
	case "json":
		return JSON(w, diags, acked...)
	case "sarif":
		return SARIF(w, diags, acked...)
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

// TextAcknowledged writes "file:line:col: acknowledged warning: POST /x: message [rule]
// (reason: …; at file:line:col)", one line per acknowledged finding, the place being the
// acknowledgement's.
func TextAcknowledged(w io.Writer, acked []spec.Acknowledged) error {
	for _, a := range acked {
		op := ""
		if a.Operation != "" {
			op = a.Operation + ": "
		}
		by := a.By.Where
		if _, err := fmt.Fprintf(w, "%s:%d:%d: acknowledged %s: %s%s [%s] (reason: %s; at %s:%d:%d)\n", a.Pos.File, a.Pos.Line, a.Pos.Col, a.Severity, op, a.Message, a.Rule, a.By.Reason, by.File, by.Line, by.Col); err != nil {
			return err
		}
	}
	return nil
}

// Summary is the one-line count printed after text output, e.g. "openapi.yaml: 2 errors, 1
// warning", with the number of acknowledged warnings when there are any ("…, 3 acknowledged").
func Summary(file string, diags []spec.Diagnostic, acknowledged int) string {
	s := summary(file, diags)
	if acknowledged > 0 {
		s += fmt.Sprintf(" (%d acknowledged)", acknowledged)
	}
	return s
}

func summary(file string, diags []spec.Diagnostic) string {
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
	// Acknowledged is set on an acknowledged finding only.
	Acknowledged *jsonAcknowledgement `json:"acknowledged,omitempty"`
}

type jsonAcknowledgement struct {
	Reason string `json:"reason"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// JSON writes an array of diagnostics (an empty array when there are none), indented, in the
// order given, then the acknowledged findings, each with an "acknowledged" member that gives the
// reason and where the acknowledgement is written.
func JSON(w io.Writer, diags []spec.Diagnostic, acked ...spec.Acknowledged) error {
	out := make([]jsonDiagnostic, 0, len(diags)+len(acked))
	one := func(d spec.Diagnostic) jsonDiagnostic {
		return jsonDiagnostic{
			File: d.Pos.File, Line: d.Pos.Line, Column: d.Pos.Col,
			Severity: string(d.Severity), Rule: d.Rule, Operation: d.Operation, Message: d.Message,
		}
	}
	for _, d := range diags {
		out = append(out, one(d))
	}
	for _, a := range acked {
		j := one(a.Diagnostic)
		j.Acknowledged = &jsonAcknowledgement{Reason: a.By.Reason, File: a.By.Where.File, Line: a.By.Where.Line, Column: a.By.Where.Col}
		out = append(out, j)
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
	// Suppressions is set on an acknowledged finding: SARIF's own way to say a result was
	// reviewed and accepted, which code-scanning tools show as dismissed rather than open.
	Suppressions []sarifSuppression `json:"suppressions,omitempty"`
}

type sarifSuppression struct {
	Kind          string         `json:"kind"` // inSource: in the spec; external: in a config file
	Status        string         `json:"status"`
	Justification string         `json:"justification"`
	Location      *sarifLocation `json:"location,omitempty"`
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
// the message text, since SARIF has no field for it that viewers show. The acknowledged findings
// follow the others, each with a suppression that carries the reason and the acknowledgement's
// place.
func SARIF(w io.Writer, diags []spec.Diagnostic, acked ...spec.Acknowledged) error {
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
	result := func(d spec.Diagnostic) sarifResult {
		text := d.Message
		if d.Operation != "" {
			text = d.Operation + ": " + text
		}
		return sarifResult{
			RuleID:    d.Rule,
			RuleIndex: index[d.Rule],
			Level:     string(d.Severity),
			Message:   sarifText{Text: text},
			Locations: []sarifLocation{{PhysicalLocation: physical(d.Pos)}},
		}
	}
	for _, d := range diags {
		run.Results = append(run.Results, result(d))
	}
	for _, a := range acked {
		r := result(a.Diagnostic)
		kind := "external"
		if a.By.InSpec {
			kind = "inSource"
		}
		r.Suppressions = []sarifSuppression{{Kind: kind, Status: "accepted", Justification: a.By.Reason,
			Location: &sarifLocation{PhysicalLocation: physical(a.By.Where)}}}
		run.Results = append(run.Results, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(sarifLog{Schema: SARIFSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}

func physical(p policy.Position) sarifPhysical {
	loc := sarifPhysical{ArtifactLocation: sarifArtifact{URI: artifactURI(p.File)}}
	if p.Line > 0 {
		loc.Region = &sarifRegion{StartLine: p.Line, StartColumn: p.Col}
	}
	return loc
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
