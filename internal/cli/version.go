package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersionCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print idemgen's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
				v = bi.Main.Version
			}
			fmt.Fprintln(s.out, "idemgen", v)
			return nil
		},
	}
}
