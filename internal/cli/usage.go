package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemgen/idemgen/internal/spec"
)

// The argument checks below replace cobra's ("accepts 1 arg(s), received 0", and "unknown command"
// for an argument to a command that takes none): a message about the command line names the
// argument the command wants, and Main follows every usage error with the command's own --help.

// oneSpec is the Args of a command that takes exactly one SPEC; purpose completes "the OpenAPI
// document to …".
func oneSpec(purpose string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("%s needs SPEC, the OpenAPI document to %s", cmd.Name(), purpose)
		case len(args) > 1:
			return fmt.Errorf("%s takes one SPEC, got %d (%s): %s one document at a time", cmd.Name(), len(args), strings.Join(args, ", "), cmd.Name())
		}
		return nil
	}
}

// optionalSpec is the Args of generate, whose SPEC may also come from idemgen.yaml.
func optionalSpec(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return fmt.Errorf("%s takes at most one SPEC, got %d (%s): generate one document per run, or name it in idemgen.yaml", cmd.Name(), len(args), strings.Join(args, ", "))
	}
	return nil
}

// noArgs is the Args of a command whose settings are all flags.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var flags []string
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			flags = append(flags, "--"+f.Name)
		}
	})
	msg := fmt.Sprintf("%s takes no arguments, got %q", cmd.Name(), strings.Join(args, " "))
	if len(flags) > 0 {
		msg += " (its settings are flags: " + strings.Join(flags, ", ") + ")"
	}
	return errors.New(msg)
}

// flagError rewrites pflag's errors in the words of the command line: the flag as typed, the
// value, and what the flag wants, rather than a Go parse error ("strconv.ParseInt: parsing …").
func flagError(cmd *cobra.Command, err error) error {
	var notExist *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	var required *pflag.ValueRequiredError
	switch {
	case errors.As(err, &notExist) && notExist.GetSpecifiedShortnames() == "":
		name := notExist.GetSpecifiedName()
		var known []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })
		if s := spec.DidYouMean(name, known); s != "" {
			return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, s)
		}
		return fmt.Errorf("unknown flag --%s", name)
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		return fmt.Errorf("--%s: %q is not %s", f.Name, invalid.GetValue(), flagKind(f))
	case errors.As(err, &required):
		return fmt.Errorf("--%s needs a value", required.GetFlag().Name)
	}
	return err
}

// flagKind names what a flag's value must be, from pflag's type names.
func flagKind(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 30s or 5m"
	}
	return "a valid " + f.Value.Type()
}
