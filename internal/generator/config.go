package generator

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
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
	// Client asks for the retry-safe client too (client.gen.go, see ClientFile).
	Client bool
	// ValidateRequestBody has request bodies checked against the spec before any key is claimed
	// (see Options.ValidateRequestBody).
	ValidateRequestBody bool
	// OapiCodegen holds the oapi-codegen options passed through (output-options, compatibility,
	// additional-imports, import-mapping), nil when the key is absent.
	OapiCodegen *codegen.Configuration
	// Acknowledge lists the lint warnings reviewed and accepted (the lint key): generate and lint
	// leave them out of their output (spec.Spec.Acknowledge).
	Acknowledge []spec.Acknowledgement
	// Override holds x-idempotency fields that replace, in every idempotent operation, what the
	// spec says (the override key; spec.LoadOpts.Override): one spec generated twice, once as
	// written and once with, say, claim: transaction. Nil when the key is absent.
	Override *policy.Raw
}

// configKeys are the top-level keys, in the order messages list them.
var configKeys = []string{"version", "spec", "package", "output", "router", "allow-remote-refs", "client", "validate-request-body", "oapi-codegen", "lint", "override"}

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
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
				err = fmt.Errorf("version: expected the number %d, got %s", ConfigVersion, describeNode(v))
			} else if err = v.Decode(&c.Version); err == nil && c.Version != ConfigVersion {
				err = fmt.Errorf("version %d is not supported (this idemgen reads version %d)", c.Version, ConfigVersion)
			}
		case "spec", "package", "output", "router":
			dst := map[string]*string{"spec": &c.Spec, "package": &c.Package, "output": &c.Output, "router": &c.Router}[k.Value]
			err = decodeString(k.Value, v, dst)
			if err == nil && k.Value == "router" && !IsRouter(c.Router) {
				err = fmt.Errorf("router: %w", UnknownRouterError(c.Router))
			}
		case "allow-remote-refs":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				err = fmt.Errorf("allow-remote-refs: expected true or false, got %s", describeNode(v))
			} else {
				err = v.Decode(&c.AllowRemoteRefs)
			}
		case "client":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				err = fmt.Errorf("client: expected true or false, got %s", describeNode(v))
			} else {
				err = v.Decode(&c.Client)
			}
		case "validate-request-body":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				err = fmt.Errorf("validate-request-body: expected true or false, got %s", describeNode(v))
			} else {
				err = v.Decode(&c.ValidateRequestBody)
			}
		case "oapi-codegen":
			if _, err = decodePassthrough(v); err == nil {
				if problems := checkOptions(at, "oapi-codegen", v, reflect.TypeFor[codegen.Configuration]()); len(problems) > 0 {
					errs = append(errs, problems...)
				} else {
					passthrough = v
				}
			}
		case "lint":
			acks, diags := spec.ParseLintSettings(path, "lint", v, "")
			for _, d := range diags {
				errs = append(errs, errors.New(d.String()))
			}
			c.Acknowledge = acks
		case "override":
			raw, diags := spec.ParseOverride(path, "override", v)
			for _, d := range diags {
				errs = append(errs, errors.New(d.String()))
			}
			c.Override = raw
		default:
			err = unknownKey(k.Value, k.Value, configKeys)
		}
		if err != nil {
			n := v
			if strings.HasPrefix(err.Error(), "unknown key") { // the key is what is wrong, not its value
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

func decodeString(key string, v *yaml.Node, dst *string) error {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return fmt.Errorf("%s: expected a string, got %s", key, describeNode(v))
	}
	*dst = v.Value
	return nil
}

// unknownKey says that key (written as path) is not one of known, with a suggestion when one is
// close and the list otherwise (unless it is too long to read, as oapi-codegen's option lists
// are).
func unknownKey(path, key string, known []string) error {
	if s := spec.DidYouMean(key, known); s != "" {
		return fmt.Errorf("unknown key %q; did you mean %s?", path, s)
	}
	if len(known) > 12 {
		return fmt.Errorf("unknown key %q (not an option oapi-codegen reads there)", path)
	}
	return fmt.Errorf("unknown key %q (known keys: %s)", path, strings.Join(known, ", "))
}

// decodePassthrough checks the oapi-codegen key's own keys; the options themselves are decoded
// from the whole file by decodePassthroughOptions, so their errors carry real line numbers.
func decodePassthrough(v *yaml.Node) (*codegen.Configuration, error) {
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("oapi-codegen: expected a mapping of oapi-codegen options (%s), got %s", strings.Join(oapiPassthroughKeys, ", "), describeNode(v))
	}
	all, _ := yamlFields(reflect.TypeFor[codegen.Configuration]())
	for i := 0; i+1 < len(v.Content); i += 2 {
		k := v.Content[i]
		if slices.Contains(oapiPassthroughKeys, k.Value) {
			continue
		}
		if _, isOption := all[k.Value]; isOption {
			return nil, &posError{node: k, msg: fmt.Sprintf("oapi-codegen: %q cannot be set here (allowed: %s; idemgen sets package, generate and the router itself)", k.Value, strings.Join(oapiPassthroughKeys, ", "))}
		}
		return nil, &posError{node: k, msg: unknownKey("oapi-codegen."+k.Value, k.Value, oapiPassthroughKeys).Error()}
	}
	return &codegen.Configuration{}, nil
}

// yamlFields maps the yaml key of each field of the struct type t to the field, the way yaml.v3
// names them (the tag's name, else the lower-cased field name), and lists the keys in the
// struct's order.
func yamlFields(t reflect.Type) (map[string]reflect.StructField, []string) {
	out := map[string]reflect.StructField{}
	var names []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		out[name] = f
		names = append(names, name)
	}
	return out, names
}

// checkOptions walks the oapi-codegen options n against the Go type t they decode into, so that
// a misspelt option or a value of the wrong kind is reported as its key path (oapi-codegen.
// output-options.skip-prune), with its line and column, instead of as yaml.v3's "field skip-prun
// not found in type codegen.OutputOptions", which names a Go type the user never wrote.
func checkOptions(at func(*yaml.Node, string, ...any) error, path string, n *yaml.Node, t reflect.Type) []error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // yaml.v3 leaves the zero value
	}
	want := func(what string) []error {
		return []error{at(n, "%s: expected %s, got %s", path, what, describeNode(n))}
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return want("a mapping")
		}
		fields, known := yamlFields(t)
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			if !ok {
				errs = append(errs, at(k, "%s", unknownKey(path+"."+k.Value, k.Value, known)))
				continue
			}
			errs = append(errs, checkOptions(at, path+"."+k.Value, v, f.Type)...)
		}
		return errs
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return want("a mapping")
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			errs = append(errs, checkOptions(at, path+"."+n.Content[i].Value, n.Content[i+1], t.Elem())...)
		}
		return errs
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return want("a list")
		}
		var errs []error
		for i, e := range n.Content {
			errs = append(errs, checkOptions(at, fmt.Sprintf("%s[%d]", path, i), e, t.Elem())...)
		}
		return errs
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return want("true or false")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return want("a whole number")
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return want("a string")
		}
	}
	return nil
}

// describeNode names what a YAML value is, for "expected X, got Y" messages.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
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
	Client          yaml.Node              `yaml:"client"`
	ValidateBody    yaml.Node              `yaml:"validate-request-body"`
	OapiCodegen     *codegen.Configuration `yaml:"oapi-codegen"`
	Lint            yaml.Node              `yaml:"lint"`
	Override        yaml.Node              `yaml:"override"`
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
