package spec

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/idemgen/idemgen/internal/policy"
)

// ParseOverride reads the override key of a config file (field names it in messages): an
// x-idempotency mapping whose fields replace, in every operation that has x-idempotency, what the
// operation and the document's defaults say ([LoadOpts.Override]). Its values are checked as
// x-idempotency's are, and reported at their place in file.
func ParseOverride(file, field string, n *yaml.Node) (*policy.Raw, []Diagnostic) {
	b := &builder{file: file}
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		b.report(n, policy.RuleTypeInvalid, "", fmt.Sprintf("%s: expected a mapping of x-idempotency fields such as {claim: transaction}, got %s", field, show(n)))
		return nil, b.diags
	}
	raw := (&checker{b: b}).parsePolicy(n)
	for i := range b.diags {
		if rest, ok := strings.CutPrefix(b.diags[i].Message, "x-idempotency."); ok {
			b.diags[i].Message = field + "." + rest
		}
	}
	return raw, b.diags
}

// overlay returns raw with every field over sets replaced by over's; key's fields are replaced
// one by one. raw itself is not changed.
func overlay(raw, over *policy.Raw) *policy.Raw {
	if over == nil {
		return raw
	}
	out := *raw
	overlayFields(reflect.ValueOf(&out).Elem(), reflect.ValueOf(over).Elem())
	return &out
}

// overlayFields copies each set policy.Field of src onto dst, descending into the structs that
// group fields (policy.RawKey).
func overlayFields(dst, src reflect.Value) {
	for i := range src.NumField() {
		f := src.Field(i)
		if set := f.FieldByName("Set"); set.IsValid() {
			if set.Bool() {
				dst.Field(i).Set(f)
			}
			continue
		}
		overlayFields(dst.Field(i), f)
	}
}
