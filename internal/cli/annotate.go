package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder: replaced by the real command.
func newAnnotateCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "annotate",
		Short: "not implemented yet",
		RunE: func(*cobra.Command, []string) error {
			return fail(ExitUsage, errors.New("annotate: not implemented yet"))
		},
	}
}
