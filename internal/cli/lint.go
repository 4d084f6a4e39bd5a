package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgen/idemgen/internal/lint"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

func newLintCmd(s *streams) *cobra.Command {
	var (
		format      string
		failOn      string
		allowRemote bool
	)
	cmd := &cobra.Command{
		Use:   "lint SPEC",
		Short: "Check a spec's x-idempotency extensions",
		Long: `Check every x-idempotency in SPEC (OpenAPI 3.0 or 3.1, YAML or JSON) against the rules
idemgen enforces at generation time, plus warnings for likely mistakes: idempotency on a safe
method, a POST without idempotency, a ttl shorter than the lease, a key header that is declared
but unused, an operation's own 409 that the in-progress answer now shares.

Exit status: 0 when there is no finding at or above --fail-on, 1 when there is, 2 when the spec
cannot be read or loaded.`,
		Example: `  idemgen lint openapi.yaml
  idemgen lint openapi.yaml --fail-on warning
  idemgen lint openapi.yaml --format sarif > idemgen.sarif`,
		Args: oneSpec("check"),
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
			file := lintDisplayPath(args[0])
			sp, err := spec.Load(file, &spec.LoadOpts{AllowRemoteRefs: allowRemote})
			if err != nil {
				return fail(ExitUsage, err)
			}
			if err := lint.Write(s.out, format, sp.Diagnostics); err != nil {
				return fail(ExitUsage, fmt.Errorf("lint: writing the report: %w", err))
			}
			if format == "text" {
				fmt.Fprintln(s.err, lint.Summary(file, sp.Diagnostics))
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
