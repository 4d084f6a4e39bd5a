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

type generateFlags struct {
	pkg, output, router, config string
	check, allowRemoteRefs      bool
	client, validateRequestBody bool
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
	fl.StringVarP(&f.pkg, "package", "p", "", "Go package name (default: the output directory's name)")
	fl.StringVarP(&f.output, "output", "o", "", "directory to write the *.gen.go files to (default: the config file's directory, or .)")
	fl.StringVar(&f.router, "router", generator.RouterStdHTTP, "HTTP router, the name of oapi-codegen's *-server option: "+strings.Join(generator.Routers, ", "))
	fl.StringVarP(&f.config, "config", "c", "", "config file (default ./idemgen.yaml when no SPEC is given)")
	fl.BoolVar(&f.check, "check", false, "write nothing; print a diff and exit 1 when the files on disk are stale")
	fl.BoolVar(&f.allowRemoteRefs, "allow-remote-refs", false, "follow $refs to other hosts (refused by default; also allow-remote-refs in idemgen.yaml)")
	fl.BoolVar(&f.client, "client", false, "also write client.gen.go, a retry-safe client of the API (also client: true in idemgen.yaml)")
	fl.BoolVar(&f.validateRequestBody, "validate-request-body", false, "check request bodies against the spec before any key is claimed: 400 request-invalid, no key bound (also validate-request-body: true in idemgen.yaml)")
	return cmd
}

// generateJob is what to generate, after config file and flags are merged.
type generateJob struct {
	spec, pkg, output, router string
	allowRemoteRefs, client   bool
	validateRequestBody       bool
	cfg                       *generator.Config
}

func runGenerate(cmd *cobra.Command, s *streams, f *generateFlags, args []string) error {
	job, err := resolveJob(cmd, f, args)
	if err != nil {
		return fail(ExitUsage, err)
	}
	loadOpts := &spec.LoadOpts{AllowRemoteRefs: job.allowRemoteRefs}
	if job.cfg != nil {
		loadOpts.Override = job.cfg.Override
	}
	loaded, err := spec.Load(job.spec, loadOpts)
	if err != nil {
		return fail(ExitUsage, err)
	}
	if job.cfg != nil {
		loaded.Acknowledge(job.cfg.Acknowledge)
	}
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
		return fail(ExitUsage, fmt.Errorf("%s: %d %s in x-idempotency; nothing was generated", job.spec, n, noun))
	}

	opts := generator.Options{Package: job.pkg, Router: job.router, AllowRemoteRefs: job.allowRemoteRefs, Client: job.client, ValidateRequestBody: job.validateRequestBody}
	if job.cfg != nil {
		opts.OapiCodegen = job.cfg.OapiCodegen
	}
	files, err := generator.Generate(generator.Input{File: loaded.File, Raw: loaded.Raw, Model: loaded.Model, Doc: loaded.Doc}, opts)
	if err != nil {
		return fail(ExitUsage, err)
	}
	// oapi-codegen writes a package whose names collide without a word: it is checked here, so
	// the user hears of it with the options that resolve it rather than from go build.
	if cs, err := collisions(files); err != nil {
		return fail(ExitUsage, fmt.Errorf("%s: %w", job.spec, err))
	} else if len(cs) > 0 {
		return fail(ExitUsage, collisionError(job.spec, cs))
	}

	dst := generator.DirFS(job.output)
	if f.check {
		stale, err := generator.Check(dst, job.output, files, s.out)
		if err != nil {
			return fail(ExitUsage, fmt.Errorf("check %s: %w", job.output, err))
		}
		if stale {
			return fail(ExitFindings, fmt.Errorf("generated files in %s are stale: run go generate ./... (where a //go:generate line runs idemgen), or %s, to update them", job.output, regenerateCommand(cmd, args)))
		}
		return nil
	}
	if _, err := generator.Write(dst, files); err != nil {
		return fail(ExitUsage, fmt.Errorf("write %s: %w", job.output, err))
	}
	return nil
}

// resolveJob merges the config file (named by --config, or ./idemgen.yaml when no SPEC is given)
// with the flags; a flag set on the command line wins.
func resolveJob(cmd *cobra.Command, f *generateFlags, args []string) (*generateJob, error) {
	job := &generateJob{router: generator.RouterStdHTTP}
	cfgPath := f.config
	if cfgPath == "" && len(args) == 0 {
		cfgPath = defaultConfig
		if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
			return nil, errors.New("no spec given and no idemgen.yaml here: run `idemgen generate --package api --output api openapi.yaml`, or write an idemgen.yaml (see `idemgen generate --help`)")
		}
	}
	if cfgPath != "" {
		c, err := readConfig(cfgPath)
		if err != nil {
			return nil, err
		}
		job.cfg = c
		job.spec, job.pkg, job.output, job.allowRemoteRefs, job.client = c.Spec, c.Package, c.Output, c.AllowRemoteRefs, c.Client
		job.validateRequestBody = c.ValidateRequestBody
		if c.Router != "" {
			job.router = c.Router
		}
		if job.output == "" {
			job.output = filepath.Dir(cfgPath)
		}
	}
	if len(args) == 1 {
		job.spec = args[0]
	}
	changed := cmd.Flags().Changed
	if changed("package") {
		job.pkg = f.pkg
	}
	if changed("output") {
		job.output = f.output
	}
	if changed("router") {
		// A router from the config file was checked by ParseConfig, which names its line.
		if !generator.IsRouter(f.router) {
			return nil, fmt.Errorf("--router: %w", generator.UnknownRouterError(f.router))
		}
		job.router = f.router
	}
	if changed("allow-remote-refs") {
		job.allowRemoteRefs = f.allowRemoteRefs
	}
	if changed("client") {
		job.client = f.client
	}
	if changed("validate-request-body") {
		job.validateRequestBody = f.validateRequestBody
	}
	if job.spec == "" {
		return nil, fmt.Errorf("%s names no spec: add `spec: openapi.yaml`, or pass the spec as an argument", cfgPath)
	}
	if job.output == "" {
		job.output = "."
	}
	if job.pkg == "" {
		abs, err := filepath.Abs(job.output)
		if err != nil {
			return nil, err
		}
		job.pkg = strings.ReplaceAll(filepath.Base(abs), "-", "_")
		if generator.CheckPackage(job.pkg) != nil {
			return nil, fmt.Errorf("cannot derive a package name from output directory %q: pass --package", job.output)
		}
	}
	return job, nil
}

// readConfig reads and parses the config file at path.
func readConfig(path string) (*generator.Config, error) {
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
