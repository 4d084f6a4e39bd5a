package generator

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"gopkg.in/yaml.v3"
)

// ConfigSchema is the JSON Schema of idemgen.yaml.
//
//go:embed config.schema.json
var ConfigSchema []byte

// ConfigVersion is the only config file version this idemgen reads.
const ConfigVersion = 1

// Config is idemgen.yaml: what `idemgen generate` reads when no spec is named on the command line.
// Keys are kebab-case, as in oapi-codegen's own configuration.
type Config struct {
	Version         int
	Spec            string // resolved against the config file's directory
	Package         string
	Output          string // resolved against the config file's directory
	Router          string
	AllowRemoteRefs bool
	// OapiCodegen holds the oapi-codegen options passed through (output-options, compatibility,
	// additional-imports, import-mapping), nil when the key is absent.
	OapiCodegen *codegen.Configuration
}

// configKeys are the top-level keys, in the order messages list them.
var configKeys = []string{"version", "spec", "package", "output", "router", "allow-remote-refs", "oapi-codegen"}

// oapiPassthroughKeys are the oapi-codegen configuration keys idemgen.yaml may set; the others
// (package, generate, output-options filters) are idemgen's to decide.
var oapiPassthroughKeys = []string{"output-options", "compatibility", "import-mapping", "additional-imports"}

// ParseConfig reads a config file's bytes; path names it in messages and anchors relative paths.
// Every problem is an error of the form "path:line:col: what (what to do)".
func ParseConfig(path string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty config file (start with \"version: 1\")", path)
	}
	root := doc.Content[0]
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("%s:%d:%d: %s", path, n.Line, n.Column, fmt.Sprintf(format, args...))
	}
	if root.Kind != yaml.MappingNode {
		return nil, at(root, "the config must be a mapping of keys (version, spec, package, output, …)")
	}
	c := &Config{}
	var passthrough *yaml.Node
	seen := map[string]bool{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if seen[k.Value] {
			errs = append(errs, at(k, "%q is set twice", k.Value))
			continue
		}
		seen[k.Value] = true
		var err error
		switch k.Value {
		case "version":
			err = v.Decode(&c.Version)
			if err == nil && c.Version != ConfigVersion {
				err = fmt.Errorf("version %d is not supported (this idemgen reads version %d)", c.Version, ConfigVersion)
			}
		case "spec":
			err = decodeString(v, &c.Spec)
		case "package":
			err = decodeString(v, &c.Package)
		case "output":
			err = decodeString(v, &c.Output)
		case "router":
			if err = decodeString(v, &c.Router); err == nil && !IsRouter(c.Router) {
				err = fmt.Errorf("router: %w", UnknownRouterError(c.Router))
			}
		case "allow-remote-refs":
			err = v.Decode(&c.AllowRemoteRefs)
		case "oapi-codegen":
			if _, err = decodePassthrough(v); err == nil {
				passthrough = v
			}
		default:
			err = fmt.Errorf("unknown key %q (known keys: %s)", k.Value, strings.Join(configKeys, ", "))
		}
		if err != nil {
			n := v
			if strings.HasPrefix(err.Error(), "unknown key") {
				n = k
			}
			var pe *posError
			if errors.As(err, &pe) {
				n = pe.node
			}
			errs = append(errs, at(n, "%s", strings.TrimPrefix(err.Error(), "yaml: ")))
		}
	}
	if !seen["version"] {
		errs = append(errs, at(root, "missing \"version: %d\" (it says which format this file is in)", ConfigVersion))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if passthrough != nil {
		var err error
		if c.OapiCodegen, err = decodePassthroughOptions(path, data, passthrough); err != nil {
			return nil, err
		}
	}
	dir := filepath.Dir(path)
	if c.Spec != "" && !filepath.IsAbs(c.Spec) && !isURL(c.Spec) {
		c.Spec = filepath.Join(dir, c.Spec)
	}
	if c.Output != "" && !filepath.IsAbs(c.Output) {
		c.Output = filepath.Join(dir, c.Output)
	}
	return c, nil
}

type posError struct {
	node *yaml.Node
	msg  string
}

func (e *posError) Error() string { return e.msg }

func decodeString(v *yaml.Node, dst *string) error {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return fmt.Errorf("expected a string")
	}
	*dst = v.Value
	return nil
}

// decodePassthrough checks the oapi-codegen key's own keys; the options themselves are decoded
// from the whole file by decodePassthroughOptions, so their errors carry real line numbers.
func decodePassthrough(v *yaml.Node) (*codegen.Configuration, error) {
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("oapi-codegen must be a mapping (keys: %s)", strings.Join(oapiPassthroughKeys, ", "))
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if k := v.Content[i]; !slices.Contains(oapiPassthroughKeys, k.Value) {
			return nil, &posError{node: k, msg: fmt.Sprintf("oapi-codegen: %q cannot be set here (allowed: %s; idemgen sets package, generate and the router itself)", k.Value, strings.Join(oapiPassthroughKeys, ", "))}
		}
	}
	return &codegen.Configuration{}, nil
}

// passthroughFile is idemgen.yaml as yaml.v3 decodes it strictly: only the oapi-codegen options
// are typed, the other keys were checked by ParseConfig.
type passthroughFile struct {
	Version         yaml.Node              `yaml:"version"`
	Spec            yaml.Node              `yaml:"spec"`
	Package         yaml.Node              `yaml:"package"`
	Output          yaml.Node              `yaml:"output"`
	Router          yaml.Node              `yaml:"router"`
	AllowRemoteRefs yaml.Node              `yaml:"allow-remote-refs"`
	OapiCodegen     *codegen.Configuration `yaml:"oapi-codegen"`
}

var yamlLineError = regexp.MustCompile(`^\s*line (\d+): (.*)$`)

// decodePassthroughOptions decodes the oapi-codegen options strictly, so a misspelt option is an
// error rather than a silent no-op. Pruning stays off unless output-options.skip-prune says
// otherwise.
func decodePassthroughOptions(path string, data []byte, v *yaml.Node) (*codegen.Configuration, error) {
	var f passthroughFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		var msgs []string
		for _, l := range strings.Split(err.Error(), "\n") {
			if m := yamlLineError.FindStringSubmatch(l); m != nil {
				msgs = append(msgs, fmt.Sprintf("%s:%s: oapi-codegen: %s", path, m[1], m[2]))
			}
		}
		if len(msgs) == 0 {
			msgs = append(msgs, fmt.Sprintf("%s:%d:%d: oapi-codegen: %v", path, v.Line, v.Column, err))
		}
		return nil, errors.New(strings.Join(msgs, "\n"))
	}
	c := f.OapiCodegen
	if c == nil {
		c = &codegen.Configuration{}
	}
	if !hasKey(v, "output-options", "skip-prune") {
		c.OutputOptions.SkipPrune = true
	}
	return c, nil
}

// hasKey reports whether the mapping n has the nested keys path.
func hasKey(n *yaml.Node, path ...string) bool {
	for _, k := range path {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return true
}

func isURL(s string) bool { return strings.Contains(s, "://") }
