package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real command.
func newLintCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "lint",
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return fail(ExitUsage, errors.New("lint: not implemented yet")) },
	}
}
