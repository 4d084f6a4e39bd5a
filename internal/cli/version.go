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
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(s.out, "idemgen", version())
			return nil
		},
	}
}

// version is the module version the binary was built from: the one go.mod requires when run as
// go tool idemgen, or "(devel)" for a build inside a checkout. A replaced module says by what,
// so that someone working on a fork or a checkout sees that its code is what runs.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if r := bi.Main.Replace; r != nil {
		by := r.Path
		if r.Version != "" && r.Version != "(devel)" { // a directory has no version
			by += " " + r.Version
		}
		v += " (replaced by " + by + ")"
	}
	return v
}
