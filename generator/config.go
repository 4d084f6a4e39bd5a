package generator

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
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
			err = decodeString(v, &c.Router)
		case "allow-remote-refs":
			err = v.Decode(&c.AllowRemoteRefs)
		case "oapi-codegen":
			c.OapiCodegen, err = decodePassthrough(v)
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

// decodePassthrough decodes the oapi-codegen key strictly: an unknown option is an error with
// its position, not a silent no-op. Pruning defaults to off, as without the key.
func decodePassthrough(v *yaml.Node) (*codegen.Configuration, error) {
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("oapi-codegen must be a mapping (keys: %s)", strings.Join(oapiPassthroughKeys, ", "))
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if k := v.Content[i]; !slices.Contains(oapiPassthroughKeys, k.Value) {
			return nil, &posError{node: k, msg: fmt.Sprintf("oapi-codegen: %q cannot be set here (allowed: %s; idemgen sets package, generate and the router itself)", k.Value, strings.Join(oapiPassthroughKeys, ", "))}
		}
	}
	raw, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	c := &codegen.Configuration{}
	c.OutputOptions.SkipPrune = true
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		// Lines in this error count from the oapi-codegen key.
		return nil, fmt.Errorf("oapi-codegen (lines counted from this key): %w", err)
	}
	return c, nil
}

func isURL(s string) bool { return strings.Contains(s, "://") }
