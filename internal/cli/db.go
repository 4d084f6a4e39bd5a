package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholders: replaced by the real commands.
func newSchemaCmd(s *streams) *cobra.Command  { return placeholder("schema") }
func newMigrateCmd(s *streams) *cobra.Command { return placeholder("migrate") }
func newPurgeCmd(s *streams) *cobra.Command   { return placeholder("purge") }

func placeholder(name string) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: "not implemented yet",
		RunE:  func(*cobra.Command, []string) error { return fail(ExitUsage, errors.New(name+": not implemented yet")) },
	}
}
