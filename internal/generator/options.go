package generator

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
	"github.com/idemgen/idemgen/internal/spec"
)

// Options are the settings of one generate run: what idemgen.yaml and `idemgen generate`'s flags
// say, one field per setting. Its tags are the whole of a setting's plumbing:
//
//   - config:"key" is its key in idemgen.yaml (keys are kebab-case, as in oapi-codegen's own
//     configuration), listed in messages in the fields' order; ",path" resolves a relative
//     path against the config file's directory.
//   - flag:"name" is generate's flag that overrides it when set on the command line.
//
// ParseConfig and SetFlags walk the same fields and decode a value by its field's type (a
// string, a bool, a *Router, …), so a new setting is a field with its tags, its entry in
// config.schema.json and its flag's line in internal/cli (tests keep the three equal).
type Options struct {
	// Version is the config file's format version (ConfigVersion); unused on the command line.
	Version int `config:"version"`
	// Spec is the OpenAPI document: a path (resolved against the config file's directory) or
	// URL. The command line gives it as an argument.
	Spec string `config:"spec,path"`
	// Package is the Go package name of the generated files.
	Package string `config:"package" flag:"package"`
	// Output is the directory the files are written to.
	Output string `config:"output,path" flag:"output"`
	// Router is the server router, resolved from its name when read; nil means DefaultRouter.
	Router *Router `config:"router" flag:"router"`
	// AllowRemoteRefs lets the document's $refs reach other hosts.
	AllowRemoteRefs bool `config:"allow-remote-refs" flag:"allow-remote-refs"`
	// Client asks for ClientFile too: oapi-codegen's client, and a retry-safe wrapper of it (see
	// client.go).
	Client bool `config:"client" flag:"client"`
	// ValidateRequestBody has every request body checked against the spec before any key is
	// claimed (runtime/idemopenapi, on the spec oapi-codegen embeds in OapiFile). Off, the
	// generated code neither embeds the spec nor imports kin-openapi.
	ValidateRequestBody bool `config:"validate-request-body" flag:"validate-request-body"`
	// OapiCodegen, when set, is the base oapi-codegen configuration (output-options,
	// compatibility, additional-imports, import-mapping). idemgen overrides what its adapter
	// depends on: package, router, strict server, models, no operation filters or user
	// templates. nil means idemgen's defaults (pruning off).
	OapiCodegen *codegen.Configuration `config:"oapi-codegen"`
	// Acknowledge lists the lint warnings reviewed and accepted (the lint key): generate and lint
	// leave them out of their output (spec.Spec.Acknowledge).
	Acknowledge []spec.Acknowledgement `config:"lint"`
	// Override holds x-idempotency fields that replace, in every idempotent operation, what the
	// spec says (spec.LoadOpts.Override): one spec generated twice, once as written and once
	// with, say, claim: transaction. Nil when the key is absent.
	Override *policy.Raw `config:"override"`
}

// option is one field of Options, as its tags describe it.
type option struct {
	index int
	key   string // config key
	path  bool   // a path, resolved against the config file's directory
	flag  string // "" when no flag sets it
}

// options are Options' fields in order: the one description of every setting that ParseConfig,
// SetFlags, ConfigKeys and OptionFlags read.
var options = func() []option {
	var out []option
	t := reflect.TypeFor[Options]()
	for i := range t.NumField() {
		f := t.Field(i)
		key, mod, _ := strings.Cut(f.Tag.Get("config"), ",")
		if key == "" {
			panic("generator: Options." + f.Name + " has no config tag")
		}
		out = append(out, option{index: i, key: key, path: mod == "path", flag: f.Tag.Get("flag")})
	}
	return out
}()

// ConfigKeys are idemgen.yaml's top-level keys, in the order messages list them.
func ConfigKeys() []string {
	keys := make([]string, len(options))
	for i, o := range options {
		keys[i] = o.key
	}
	return keys
}

// OptionFlags are the names of the flags SetFlags reads.
func OptionFlags() []string {
	var out []string
	for _, o := range options {
		if o.flag != "" {
			out = append(out, o.flag)
		}
	}
	return out
}

func findOption(key string) (option, bool) {
	for _, o := range options {
		if o.key == key {
			return o, true
		}
	}
	return option{}, false
}

// ParseConfig reads a config file's bytes; path names it in messages and anchors relative paths.
// Every problem is an error of the form "path:line:col: what (what to do)".
func ParseConfig(path string, data []byte) (*Options, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty config file (start with \"version: %d\")", path, ConfigVersion)
	}
	root := doc.Content[0]
	at := func(n *yaml.Node, format string, args ...any) error {
		return fmt.Errorf("%s:%d:%d: %s", path, n.Line, n.Column, fmt.Sprintf(format, args...))
	}
	if root.Kind != yaml.MappingNode {
		return nil, at(root, "the config must be a mapping of keys (version, spec, package, output, …)")
	}
	o := &Options{}
	d := configDecoder{path: path, at: at}
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
		if opt, ok := findOption(k.Value); ok {
			err = d.decode(opt.key, v, reflect.ValueOf(o).Elem().Field(opt.index).Addr().Interface())
		} else {
			err = &posError{node: k, msg: unknownKey(k.Value, k.Value, ConfigKeys()).Error()}
		}
		if err != nil {
			n := v
			var pe *posError
			if errors.As(err, &pe) {
				n = pe.node
			}
			errs = append(errs, at(n, "%s", strings.TrimPrefix(err.Error(), "yaml: ")))
		}
	}
	errs = append(errs, d.errs...)
	if !seen["version"] {
		errs = append(errs, at(root, "missing \"version: %d\" (it says which format this file is in)", ConfigVersion))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.passthrough != nil {
		var err error
		if o.OapiCodegen, err = decodePassthroughOptions(path, data, d.passthrough); err != nil {
			return nil, err
		}
	}
	dir := filepath.Dir(path)
	for _, opt := range options {
		if !opt.path {
			continue
		}
		p := reflect.ValueOf(o).Elem().Field(opt.index).Addr().Interface().(*string)
		if *p != "" && !filepath.IsAbs(*p) && !isURL(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return o, nil
}

// configDecoder decodes one config file's values into Options' fields, by the field's type.
type configDecoder struct {
	path string
	at   func(*yaml.Node, string, ...any) error
	// errs are the problems found inside a value, each with its own position (lint, override,
	// oapi-codegen's options).
	errs []error
	// passthrough is the oapi-codegen key's value, decoded once every key is checked.
	passthrough *yaml.Node
}

// decode sets *dst, a pointer to an Options field, from the value v of key.
func (d *configDecoder) decode(key string, v *yaml.Node, dst any) error {
	switch p := dst.(type) {
	case *int: // version, the only number
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
			return fmt.Errorf("%s: expected the number %d, got %s", key, ConfigVersion, describeNode(v))
		}
		if err := v.Decode(p); err != nil {
			return err
		}
		if *p != ConfigVersion {
			return fmt.Errorf("version %d is not supported (this idemgen reads version %d)", *p, ConfigVersion)
		}
	case *string:
		return decodeString(key, v, p)
	case *bool:
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
			return fmt.Errorf("%s: expected true or false, got %s", key, describeNode(v))
		}
		return v.Decode(p)
	case **Router:
		var name string
		if err := decodeString(key, v, &name); err != nil {
			return err
		}
		r, err := LookupRouter(name)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		*p = r
	case **codegen.Configuration:
		if err := checkPassthroughKeys(v); err != nil {
			return err
		}
		if problems := checkOptions(d.at, key, v, reflect.TypeFor[codegen.Configuration]()); len(problems) > 0 {
			d.errs = append(d.errs, problems...)
		} else {
			d.passthrough = v
		}
	case *[]spec.Acknowledgement:
		acks, diags := spec.ParseLintSettings(d.path, key, v, "")
		for _, diag := range diags {
			d.errs = append(d.errs, errors.New(diag.String()))
		}
		*p = acks
	case **policy.Raw:
		raw, diags := spec.ParseOverride(d.path, key, v)
		for _, diag := range diags {
			d.errs = append(d.errs, errors.New(diag.String()))
		}
		*p = raw
	default:
		panic(fmt.Sprintf("generator: no config decoding for %s (%T)", key, dst))
	}
	return nil
}

// SetFlags overrides o's settings with the flags given on the command line: value returns the
// flag's value as the command line spelt it, and whether it was set there. A flag's error names
// it: "--router: unknown router …".
func (o *Options) SetFlags(value func(flag string) (string, bool)) error {
	for _, opt := range options {
		if opt.flag == "" {
			continue
		}
		s, set := value(opt.flag)
		if !set {
			continue
		}
		if err := setFlag(reflect.ValueOf(o).Elem().Field(opt.index).Addr().Interface(), s); err != nil {
			return fmt.Errorf("--%s: %w", opt.flag, err)
		}
	}
	return nil
}

// setFlag sets *dst, a pointer to an Options field, from a flag's value.
func setFlag(dst any, s string) error {
	switch p := dst.(type) {
	case *string:
		*p = s
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("expected true or false, got %q", s)
		}
		*p = b
	case **Router:
		r, err := LookupRouter(s)
		if err != nil {
			return err
		}
		*p = r
	default:
		panic(fmt.Sprintf("generator: no flag decoding for %T", dst))
	}
	return nil
}

// validate checks what Generate needs of o, and fills in the default router.
func (o *Options) validate() error {
	if o.Router == nil {
		o.Router = DefaultRouter()
	}
	return CheckPackage(o.Package)
}
