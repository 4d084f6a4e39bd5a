// Package cli builds idemgen's command tree. Nothing here is global: Main builds a fresh tree for
// each call, so tests drive the CLI in-process.
package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	ExitOK       = 0 // success
	ExitFindings = 1 // lint findings, stale generated code
	ExitUsage    = 2 // bad usage, unreadable or invalid input
)

// exitError carries an exit code through cobra; its message (if any) is printed once by Main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// fail returns an error that makes Main exit with code after printing err (nil prints nothing).
func fail(code int, err error) error { return &exitError{code: code, err: err} }

// streams are the command's standard streams.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

// Main runs idemgen with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := &streams{in: stdin, out: stdout, err: stderr}
	root := newRootCmd(s)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "idemgen:", ee.err)
		}
		return ee.code
	}
	// Errors about the command line (an unknown command or flag, a bad flag value, the wrong
	// arguments) point at the help of the command that was run, which says what it takes.
	fmt.Fprintln(stderr, "idemgen:", err)
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	return ExitUsage
}

func newRootCmd(s *streams) *cobra.Command {
	root := &cobra.Command{
		Use:           "idemgen",
		Short:         "Generate idempotent Go servers from OpenAPI documents marked with x-idempotency",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version (and -v) print what the version command prints.
		Version: version(),
	}
	root.SetVersionTemplate("idemgen {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.err)
	root.AddCommand(
		newGenerateCmd(s),
		newLintCmd(s),
		newAnnotateCmd(s),
		newSchemaCmd(s),
		newMigrateCmd(s),
		newPurgeCmd(s),
		newKeysCmd(s),
		newReconcileCmd(s),
		newVersionCmd(s),
	)
	return root
}
