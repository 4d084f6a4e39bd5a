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
// exit 2 before writing anything, naming each collision and the places of the spec it comes from
// (not lines of files never written), with the oapi-codegen option that resolves the first kind
// and x-go-name for the second. With the option set only the second remains, and the option is
// not suggested again; with x-go-name as well the package is written.
func TestGenerateNameCollisions(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("openapi.yaml", []byte(collidingSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain("", "generate", "--client", "-p", "api", "-o", "api", "openapi.yaml")
	for _, want := range []string{
		"openapi.yaml: the generated package would not compile: oapi-codegen declared 2 name(s) twice; nothing was written",
		"CreateThingRequestObject, from:\n    openapi.yaml:5:5 operation createThing (POST /things), whose strict server declares CreateThingRequestObject\n" +
			"    openapi.yaml:22:5 components.schemas.CreateThingRequestObject (rename it with x-go-name: <NewName>)",
		"CreateThingResponse, from:\n    openapi.yaml:5:5 operation createThing (POST /things), whose strict server declares CreateThingResponse\n" +
			"    openapi.yaml:25:5 components.schemas.CreateThingResponse (rename it with x-go-name: <NewName>)",
		"resolve-type-name-collisions: true", "always-prefix-enum-values: true",
		"which no option renames: rename the schema",
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
	if code != ExitUsage || !strings.Contains(stderr, "declared 1 name(s) twice") || strings.Contains(stderr, "CreateThingResponse,") ||
		strings.Contains(stderr, "resolve-type-name-collisions: true") || !strings.Contains(stderr, "(resolve-type-name-collisions is on already)") {
		t.Errorf("with resolve-type-name-collisions: exit %d, stderr:\n%s\nwant only CreateThingRequestObject left, and the option not suggested again", code, stderr)
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

// TestGenerateDuplicateTypeNameNamesTheExtensionThatWorks: an enum inside a component whose
// type name is another component's (Payment.status and payment_status, both PaymentStatus) is
// refused by oapi-codegen with advice to use x-go-name, which only renames the field. generate
// names both places with the extension that renames each, and x-go-type-name on the enum, as it
// says, lets the package be written.
func TestGenerateDuplicateTypeNameNamesTheExtensionThatWorks(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /payments:
    post:
      operationId: createPayment
      x-idempotency: {scope: [operation]}
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
      requestBody:
        content:
          application/json:
            schema: {$ref: '#/components/schemas/Payment'}
      responses:
        '201':
          description: ok
          content:
            application/json:
              schema: {$ref: '#/components/schemas/payment_status'}
components:
  schemas:
    Payment:
      type: object
      properties:
        status:
          type: string
          enum: [a, b]
    payment_status:
      type: object
      properties:
        x: {type: string}
`
	if err := os.WriteFile("openapi.yaml", []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain("", "generate", "-p", "api", "-o", "api", "openapi.yaml")
	for _, want := range []string{
		"duplicate typename 'PaymentStatus'",
		"  PaymentStatus:\n    openapi.yaml:25:9 components.schemas.Payment.properties.status (rename it with x-go-type-name: <NewName>)\n" +
			"    openapi.yaml:28:5 components.schemas.payment_status (rename it with x-go-name: <NewName>)",
	} {
		if code != ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr does not say %q:\n%s", code, want, stderr)
		}
	}
	fixed := strings.Replace(spec, "        status:\n", "        status:\n          x-go-type-name: PaymentState\n", 1)
	if err := os.WriteFile("openapi.yaml", []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain("", "generate", "-p", "api", "-o", "api", "openapi.yaml"); code != ExitOK {
		t.Errorf("with x-go-type-name where the message says: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestGenerateRefusesDanglingNames: with resolve-type-name-collisions, oapi-codegen renames a
// response that shares a schema's name but leaves the strict server referring to the old name,
// so the package does not compile. generate refuses it, naming the name, the two components and
// what to do, instead of exiting 0.
func TestGenerateRefusesDanglingNames(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	spec := `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /payments:
    post:
      operationId: createPayment
      x-idempotency: {scope: [operation]}
      parameters:
        - {name: Idempotency-Key, in: header, schema: {type: string}}
      responses:
        '201':
          description: ok
        '409': {$ref: '#/components/responses/Problem'}
components:
  schemas:
    Problem:
      type: object
      properties: {code: {type: string}}
  responses:
    Problem:
      description: a problem
      content:
        application/problem+json:
          schema: {$ref: '#/components/schemas/Problem'}
`
	if err := os.WriteFile("openapi.yaml", []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	config := "version: 1\nspec: openapi.yaml\npackage: api\noutput: api\noapi-codegen:\n  output-options:\n    resolve-type-name-collisions: true\n"
	if err := os.WriteFile("idemgen.yaml", []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain("", "generate", "-c", "idemgen.yaml")
	for _, want := range []string{
		"openapi.yaml: the generated package would not compile: oapi-codegen's code refers to 1 name(s) it never declared; nothing was written",
		"ProblemResponseApplicationProblemPlusJSONResponse (generated at api.gen.go:",
		"derived from Problem, which names:\n    openapi.yaml:16:5 components.schemas.Problem\n    openapi.yaml:20:5 components.responses.Problem",
		"turn the option off, or rename one component of each pair in the spec",
	} {
		if code != ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr does not say %q:\n%s", code, want, stderr)
		}
	}
	if _, err := os.Stat("api"); err == nil {
		t.Error("the package that does not compile was written")
	}
}
