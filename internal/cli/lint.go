package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/internal/generator"
	"github.com/idemgen/idemgen/internal/lint"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

func newLintCmd(s *streams) *cobra.Command {
	var (
		format      string
		failOn      string
		allowRemote bool
		config      string
		showAcked   bool
	)
	cmd := &cobra.Command{
		Use:   "lint SPEC",
		Short: "Check a spec's x-idempotency extensions",
		Long: `Check every x-idempotency in SPEC (OpenAPI 3.0 or 3.1, YAML or JSON) against the rules
idemgen enforces at generation time, plus warnings for likely mistakes: idempotency on a safe
method, a POST without idempotency, a ttl shorter than the lease, a key header that is declared
but unused, an operation's own 409 that the in-progress answer now shares.

A warning reviewed and accepted is acknowledged, with a reason, in the spec (x-idempotency-lint
on the operation or at the document root) or in idemgen.yaml (lint: acknowledge:, read with
--config); it is then left out, like in generate's output, unless --show-acknowledged. SARIF
always lists it, as a suppressed result. An acknowledgement that accepts nothing is a warning
(acknowledgement-stale); one with an unknown rule, an error's rule or no reason is an error.

Exit status: 0 when there is no finding at or above --fail-on, 1 when there is, 2 when the spec
or the config file cannot be read or loaded.`,
		Example: `  idemgen lint openapi.yaml
  idemgen lint openapi.yaml --fail-on warning
  idemgen lint -c idemgen.yaml --show-acknowledged
  idemgen lint openapi.yaml --format sarif > idemgen.sarif`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 && cmd.Flags().Changed("config") {
				return nil
			}
			return oneSpec("check (or --config naming an idemgen.yaml with spec:)")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(lint.Formats, format) {
				return fail(ExitUsage, fmt.Errorf("lint: --format %q is not a format (use %s)", format, strings.Join(lint.Formats, ", ")))
			}
			var threshold policy.Severity
			switch failOn {
			case "error":
				threshold = policy.SeverityError
			case "warning":
				threshold = policy.SeverityWarning
			default:
				return fail(ExitUsage, fmt.Errorf("lint: --fail-on %q is not a severity (use error or warning)", failOn))
			}
			var cfg *generator.Options
			if config != "" {
				var err error
				if cfg, err = readConfig(config); err != nil {
					return fail(ExitUsage, err)
				}
			}
			var file string
			switch {
			case len(args) == 1:
				file = lintDisplayPath(args[0])
			case cfg.Spec == "":
				return fail(ExitUsage, fmt.Errorf("%s names no spec: add `spec: openapi.yaml`, or pass the spec as an argument", config))
			default:
				file = lintDisplayPath(cfg.Spec)
			}
			if cfg != nil && !cmd.Flags().Changed("allow-remote-refs") {
				allowRemote = cfg.AllowRemoteRefs
			}
			sp, err := spec.Load(file, &spec.LoadOpts{AllowRemoteRefs: allowRemote})
			if err != nil {
				return fail(ExitUsage, err)
			}
			if cfg != nil {
				sp.Acknowledge(cfg.Acknowledge)
			}
			var shown []spec.Acknowledged
			if showAcked || format == "sarif" {
				shown = sp.Acknowledged
			}
			if err := lint.Write(s.out, format, sp.Diagnostics, shown); err != nil {
				return fail(ExitUsage, fmt.Errorf("lint: writing the report: %w", err))
			}
			if format == "text" {
				fmt.Fprintln(s.err, lint.Summary(file, sp.Diagnostics, len(sp.Acknowledged)))
			}
			for _, d := range sp.Diagnostics {
				if d.Severity == policy.SeverityError || threshold == policy.SeverityWarning {
					return fail(ExitFindings, nil)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "text", "output format: text, json or sarif (SARIF 2.1.0)")
	f.StringVar(&failOn, "fail-on", "error", "lowest severity that makes lint exit 1: error or warning")
	f.BoolVar(&allowRemote, "allow-remote-refs", false, "let $ref fetch documents from other hosts")
	f.StringVarP(&config, "config", "c", "", "idemgen.yaml to read acknowledgements (lint: acknowledge:) and, without SPEC, the spec from")
	f.BoolVar(&showAcked, "show-acknowledged", false, "also print the acknowledged warnings, each with its reason (SARIF always lists them, as suppressed)")
	_ = cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions(lint.Formats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("fail-on", cobra.FixedCompletions([]string{"error", "warning"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// lintDisplayPath makes an absolute spec path relative to the working directory when it lies below
// it, so that messages and SARIF locations are the repository-relative paths people and
// code-scanning tools expect.
func lintDisplayPath(p string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	rel, err := filepath.Rel(wd, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return p
	}
	return rel
}
