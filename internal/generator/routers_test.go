package generator

import (
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestRoutersDocumented keeps docs/routers.md's table of tested versions and the config schema's
// router enum equal to the router table: a router added in one place only fails here.
func TestRoutersDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/routers.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Tested versions\n")
	if !ok {
		t.Fatal(`docs/routers.md has no "## Tested versions" section`)
	}
	type row struct{ name, module string }
	var got []row
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			if len(got) > 0 {
				break // the table ended
			}
			continue
		}
		got = append(got, row{strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.TrimSpace(cells[2])})
	}
	var want []row
	for _, r := range routerTable {
		want = append(want, row{r.Name, r.module})
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs/routers.md's tested versions list\n%v\nwant the router table's\n%v", got, want)
	}

	raw, err := os.ReadFile("config.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Router struct {
				Enum    []string `json:"enum"`
				Default string   `json:"default"`
			} `json:"router"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	if r := schema.Properties.Router; !slices.Equal(r.Enum, Routers) || r.Default != Routers[0] {
		t.Errorf("config.schema.json: router enum %v (default %q), want %v (default %q)", r.Enum, r.Default, Routers, Routers[0])
	}
}

// TestRouterTemplates checks that every router's templates parse, and that a router built on
// another has a folder of overrides only: everything it does not redefine is its base's.
func TestRouterTemplates(t *testing.T) {
	t.Parallel()
	for _, r := range routerTable {
		if r.base != "" {
			if _, err := LookupRouter(r.base); err != nil {
				t.Errorf("%s: base %q is not a router", r.Name, r.base)
			}
		}
		if err := render(&strings.Builder{}, r, &fileData{Package: "api"}); err != nil {
			t.Errorf("%s: %v", r.Name, err)
		}
	}
}

// TestConfigKeysInSchema: idemgen.yaml's keys, Options' config tags, are the schema's
// properties, so a new setting cannot ship without its schema entry.
func TestConfigKeysInSchema(t *testing.T) {
	t.Parallel()
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(ConfigSchema, &schema); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(schema.Properties))
	want := slices.Sorted(slices.Values(ConfigKeys()))
	if !slices.Equal(keys, want) {
		t.Errorf("config.schema.json's properties %v, want Options' config keys %v", keys, want)
	}
}
