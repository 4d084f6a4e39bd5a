package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemgen/idemgen/internal/generator"
	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// defaultConfig is read when generate is given neither a spec nor --config.
const defaultConfig = "idemgen.yaml"

// generateFlags are generate's own flags; the others are generator.Options', which
// generator.Options.SetFlags reads from the command line by their names.
type generateFlags struct {
	config string
	check  bool
}

func newGenerateCmd(s *streams) *cobra.Command {
	var f generateFlags
	cmd := &cobra.Command{
		Use:   "generate [SPEC]",
		Short: "Generate the Go server and its idempotent adapter from an OpenAPI document",
		Long: `Generate writes two files into the output directory: api.gen.go (oapi-codegen's models,
strict server and router) and idempotency.gen.go (the IdempotentServerInterface to implement and
the adapter that claims, completes and replays keys through the idem runtime). With --client
(client: true) also client.gen.go: oapi-codegen's client, with the idempotent operations made
retry-safe (one key per call, retries only of what a retry can fix).

With no SPEC and no --config, the settings are read from ./idemgen.yaml. Flags given on the
command line override the config file. Its keys, with paths relative to the file:

  version: 1                # required
  spec: openapi.yaml
  package: api              # default: the output directory's name
  output: api               # default: the config file's directory
  router: std-http          # or chi, gorilla, echo, echo5, gin, fiber, fiber-v3, iris
  allow-remote-refs: false  # follow $refs to other hosts
  client: false             # also client.gen.go: a retry-safe client (docs/client.md)
  validate-request-body: false  # check bodies against the spec before any key is claimed
  oapi-codegen:             # passed through: output-options, compatibility,
    output-options: {}      #   import-mapping, additional-imports
  lint:                     # warnings reviewed and accepted, left out of the output
    acknowledge:
      - {rule: response-unbounded, operation: createExport, reason: bounded by the handler}
  override:                 # x-idempotency fields forced on every idempotent operation
    claim: transaction

Its JSON Schema is internal/generator/config.schema.json in idemgen's repository.

--check writes nothing: it prints a unified diff of every stale or missing file and exits 1, or
exits 0 when the files on disk are current. Spec errors exit 2 and nothing is written.`,
		Example: `  idemgen generate --package api --output api openapi.yaml
  idemgen generate -c idemgen.yaml --check
  //go:generate go tool idemgen generate -c idemgen.yaml`,
		Args: optionalSpec,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGenerate(cmd, s, &f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.config, "config", "c", "", "config file (default ./idemgen.yaml when no SPEC is given)")
	fl.BoolVar(&f.check, "check", false, "write nothing; print a diff and exit 1 when the files on disk are stale")
	// generator.Options' flags, by the names of its flag tags (TestGenerateFlagsAreOptions).
	fl.StringP("package", "p", "", "Go package name (default: the output directory's name)")
	fl.StringP("output", "o", "", "directory to write the *.gen.go files to (default: the config file's directory, or .)")
	fl.String("router", generator.RouterStdHTTP, "HTTP router, the name of oapi-codegen's *-server option: "+strings.Join(generator.Routers, ", "))
	fl.Bool("allow-remote-refs", false, "follow $refs to other hosts (refused by default; also allow-remote-refs in idemgen.yaml)")
	fl.Bool("client", false, "also write client.gen.go, a retry-safe client of the API (also client: true in idemgen.yaml)")
	fl.Bool("validate-request-body", false, "check request bodies against the spec before any key is claimed: 400 request-invalid, no key bound (also validate-request-body: true in idemgen.yaml)")
	return cmd
}

func runGenerate(cmd *cobra.Command, s *streams, f *generateFlags, args []string) error {
	opts, err := resolveOptions(cmd, f, args)
	if err != nil {
		return fail(ExitUsage, err)
	}
	loaded, err := spec.Load(opts.Spec, &spec.LoadOpts{AllowRemoteRefs: opts.AllowRemoteRefs, Override: opts.Override})
	if err != nil {
		return fail(ExitUsage, err)
	}
	loaded.Acknowledge(opts.Acknowledge)
	for _, d := range loaded.Diagnostics {
		fmt.Fprintln(s.err, d.String())
	}
	if loaded.HasErrors() {
		n := 0
		for _, d := range loaded.Diagnostics {
			if d.Severity == policy.SeverityError {
				n++
			}
		}
		noun := "errors"
		if n == 1 {
			noun = "error"
		}
		return fail(ExitUsage, fmt.Errorf("%s: %d %s in x-idempotency; nothing was generated", opts.Spec, n, noun))
	}

	files, err := generator.Generate(generator.Input{File: loaded.File, Raw: loaded.Raw, Model: loaded.Model, Doc: loaded.Doc}, *opts)
	if err != nil {
		return fail(ExitUsage, err)
	}
	// oapi-codegen writes a package whose names collide without a word: it is checked here, so
	// the user hears of it with the options that resolve it rather than from go build.
	if cs, err := collisions(files); err != nil {
		return fail(ExitUsage, fmt.Errorf("%s: %w", opts.Spec, err))
	} else if len(cs) > 0 {
		return fail(ExitUsage, collisionError(opts, loaded.Raw, cs))
	}
	if us := undefined(files); len(us) > 0 {
		return fail(ExitUsage, undefinedError(opts, loaded.Raw, us))
	}

	dst := generator.DirFS(opts.Output)
	if f.check {
		stale, err := generator.Check(dst, opts.Output, files, s.out)
		if err != nil {
			return fail(ExitUsage, fmt.Errorf("check %s: %w", opts.Output, err))
		}
		if stale {
			return fail(ExitFindings, fmt.Errorf("generated files in %s are stale: run go generate ./... (where a //go:generate line runs idemgen), or %s, to update them", opts.Output, regenerateCommand(cmd, args)))
		}
		return nil
	}
	if _, err := generator.Write(dst, files); err != nil {
		return fail(ExitUsage, fmt.Errorf("write %s: %w", opts.Output, err))
	}
	return nil
}

// resolveOptions merges the config file (named by --config, or ./idemgen.yaml when no SPEC is
// given) with the flags; a flag set on the command line wins.
func resolveOptions(cmd *cobra.Command, f *generateFlags, args []string) (*generator.Options, error) {
	opts := &generator.Options{}
	cfgPath := f.config
	if cfgPath == "" && len(args) == 0 {
		cfgPath = defaultConfig
		if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("no spec given and no idemgen.yaml here: run `idemgen generate --package api --output api openapi.yaml`, or write an idemgen.yaml (see `idemgen generate --help`)")
		}
	}
	if cfgPath != "" {
		var err error
		if opts, err = readConfig(cfgPath); err != nil {
			return nil, err
		}
		if opts.Output == "" {
			opts.Output = filepath.Dir(cfgPath)
		}
	}
	if len(args) == 1 {
		opts.Spec = args[0]
	}
	if err := opts.SetFlags(changedFlag(cmd.Flags())); err != nil {
		return nil, err
	}
	if opts.Spec == "" {
		return nil, fmt.Errorf("%s names no spec: add `spec: openapi.yaml`, or pass the spec as an argument", cfgPath)
	}
	if opts.Output == "" {
		opts.Output = "."
	}
	if opts.Package == "" {
		abs, err := filepath.Abs(opts.Output)
		if err != nil {
			return nil, err
		}
		opts.Package = strings.ReplaceAll(filepath.Base(abs), "-", "_")
		if generator.CheckPackage(opts.Package) != nil {
			return nil, fmt.Errorf("cannot derive a package name from output directory %q: pass --package", opts.Output)
		}
	}
	return opts, nil
}

// changedFlag reads the flags set on the command line, for generator.Options.SetFlags.
func changedFlag(fl *pflag.FlagSet) func(string) (string, bool) {
	return func(name string) (string, bool) {
		f := fl.Lookup(name)
		if f == nil || !f.Changed {
			return "", false
		}
		return f.Value.String(), true
	}
}

// readConfig reads and parses the config file at path.
func readConfig(path string) (*generator.Options, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the config: %w", path, pathCause(err))
	}
	return generator.ParseConfig(path, data)
}

// regenerateCommand is the command line that writes what --check found stale: this one, as
// run, without --check, spelled as go tool runs idemgen from the module's tool line.
func regenerateCommand(cmd *cobra.Command, args []string) string {
	parts := []string{"go tool idemgen generate"}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		switch {
		case fl.Name == "check":
		case fl.Value.Type() == "bool":
			parts = append(parts, "--"+fl.Name)
		case fl.Shorthand != "":
			parts = append(parts, "-"+fl.Shorthand, fl.Value.String())
		default:
			parts = append(parts, "--"+fl.Name, fl.Value.String())
		}
	})
	return strings.Join(append(parts, args...), " ")
}
