package generator

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/spec"
)

// ConfigSchema is the JSON Schema of idemgen.yaml.
//
//go:embed config.schema.json
var ConfigSchema []byte

// ConfigVersion is the only config file version this idemgen reads.
const ConfigVersion = 1

// oapiPassthroughKeys are the oapi-codegen configuration keys idemgen.yaml may set; the others
// (package, generate, output-options filters) are idemgen's to decide.
var oapiPassthroughKeys = []string{"output-options", "compatibility", "import-mapping", "additional-imports"}

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

// checkPassthroughKeys checks the oapi-codegen key's own keys; the options themselves are decoded
// from the whole file by decodePassthroughOptions, so their errors carry real line numbers.
func checkPassthroughKeys(v *yaml.Node) error {
	if v.Kind != yaml.MappingNode {
		return fmt.Errorf("oapi-codegen: expected a mapping of oapi-codegen options (%s), got %s", strings.Join(oapiPassthroughKeys, ", "), describeNode(v))
	}
	all, _ := yamlFields(reflect.TypeFor[codegen.Configuration]())
	for i := 0; i+1 < len(v.Content); i += 2 {
		k := v.Content[i]
		if slices.Contains(oapiPassthroughKeys, k.Value) {
			continue
		}
		if _, isOption := all[k.Value]; isOption {
			return &posError{node: k, msg: fmt.Sprintf("oapi-codegen: %q cannot be set here (allowed: %s; idemgen sets package, generate and the router itself)", k.Value, strings.Join(oapiPassthroughKeys, ", "))}
		}
		return &posError{node: k, msg: unknownKey("oapi-codegen."+k.Value, k.Value, oapiPassthroughKeys).Error()}
	}
	return nil
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

// passthroughFile is the type idemgen.yaml is decoded into strictly: only the oapi-codegen
// options are typed, every other key (checked by ParseConfig) is a yaml.Node, so the decoder
// knows each of Options' keys and nothing else.
var passthroughFile = func() reflect.Type {
	var fields []reflect.StructField
	for i, o := range options {
		t := reflect.TypeFor[yaml.Node]()
		if reflect.TypeFor[Options]().Field(o.index).Type == reflect.TypeFor[*codegen.Configuration]() {
			t = reflect.TypeFor[*codegen.Configuration]()
		}
		fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: t, Tag: reflect.StructTag(fmt.Sprintf("yaml:%q", o.key))})
	}
	return reflect.StructOf(fields)
}()

var yamlLineError = regexp.MustCompile(`^\s*line (\d+): (.*)$`)

// decodePassthroughOptions decodes the oapi-codegen options strictly, so a misspelt option is an
// error rather than a silent no-op. Pruning stays off unless output-options.skip-prune says
// otherwise.
func decodePassthroughOptions(path string, data []byte, v *yaml.Node) (*codegen.Configuration, error) {
	f := reflect.New(passthroughFile)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(f.Interface()); err != nil {
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
	var c *codegen.Configuration
	for i := range f.Elem().NumField() {
		if opts, ok := f.Elem().Field(i).Interface().(*codegen.Configuration); ok {
			c = opts
		}
	}
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
