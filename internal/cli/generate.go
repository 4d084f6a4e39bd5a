package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real command.
func newGenerateCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "generate",
		Short: "not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return fail(ExitUsage, errors.New("generate: not implemented yet"))
		},
	}
}
