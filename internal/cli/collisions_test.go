package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const collidingSpec = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /things:
    post:
      operationId: createThing
      x-idempotency: true
      parameters:
        - {name: Idempotency-Key, in: header, required: true, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {$ref: "#/components/schemas/CreateThingRequestObject"}
      responses:
        "201":
          description: ok
          content:
            application/json:
              schema: {$ref: "#/components/schemas/CreateThingResponse"}
components:
  schemas:
    CreateThingRequestObject:
      type: object
      properties: {a: {type: string}}
    CreateThingResponse:
      type: object
      properties: {b: {type: string}}
`

// TestGenerateNameCollisions: names oapi-codegen declares twice (a schema named like the
// client's response wrapper, one named like the strict server's request object) make generate
// exit 2 before writing anything, naming each collision and where, with the oapi-codegen option
// that resolves the first kind and x-go-name for the second. With the option set only the
// second remains; with x-go-name as well the package is written.
func TestGenerateNameCollisions(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("openapi.yaml", []byte(collidingSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain("", "generate", "--client", "-p", "api", "-o", "api", "openapi.yaml")
	for _, want := range []string{
		"openapi.yaml: the generated package would not compile: oapi-codegen declared 2 name(s) twice; nothing was written",
		"CreateThingRequestObject (api.gen.go:", "CreateThingResponse (api.gen.go:",
		"resolve-type-name-collisions: true", "always-prefix-enum-values: true",
		"no oapi-codegen option renames those; rename the schema with x-go-name",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if code != ExitUsage {
		t.Errorf("exit %d, want %d", code, ExitUsage)
	}
	if _, err := os.Stat("api"); err == nil {
		t.Error("the colliding package was written")
	}

	config := "version: 1\nspec: openapi.yaml\npackage: api\noutput: api\nclient: true\noapi-codegen:\n  output-options:\n    resolve-type-name-collisions: true\n"
	if err := os.WriteFile("idemgen.yaml", []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMain("", "generate", "-c", "idemgen.yaml")
	if code != ExitUsage || !strings.Contains(stderr, "declared 1 name(s) twice") || strings.Contains(stderr, "CreateThingResponse (") {
		t.Errorf("with resolve-type-name-collisions: exit %d, stderr:\n%s\nwant only CreateThingRequestObject left", code, stderr)
	}

	renamed := strings.Replace(collidingSpec, "    CreateThingRequestObject:\n      type: object\n", "    CreateThingRequestObject:\n      x-go-name: ThingInput\n      type: object\n", 1)
	if err := os.WriteFile("openapi.yaml", []byte(renamed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runMain("", "generate", "-c", "idemgen.yaml")
	if code != 0 {
		t.Errorf("with the option and x-go-name: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join("api", "api.gen.go")); err != nil {
		t.Errorf("nothing written once the names no longer collide: %v", err)
	}
}
