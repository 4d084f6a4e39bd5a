package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const annotateSpec = `openapi: 3.0.3
info:
  title: CLI test   # a comment that must survive
  version: "1"
paths:
  /orders:
    post:
      operationId: createOrder
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses:
        '201':
          description: created
    put:
      operationId: replaceOrders
      responses:
        '204':
          description: replaced
  /files:
    post:
      operationId: uploadFile
      requestBody:
        content:
          multipart/form-data:
            schema: {type: object}
      responses:
        '201':
          description: stored
`

type cliRun struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, stdin string, args ...string) cliRun {
	t.Helper()
	code, stdout, stderr := runMain(stdin, args...)
	return cliRun{code, stdout, stderr}
}

func writeSpec(t *testing.T, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "openapi.yaml")
	if err := os.WriteFile(path, []byte(annotateSpec), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// skipLines are annotate's notes on the operations it cannot annotate with --scope path:id.
const skipLines = "openapi.yaml:7:5: POST /orders: not annotated: x-idempotency.scope: path:id is not a path parameter of /orders (the path has no parameters)\n" +
	"openapi.yaml:22:5: POST /files: not annotated: x-idempotency.scope: path:id is not a path parameter of /files (the path has no parameters)\n"

// singleTenant is the line annotate prints when it chooses scope [operation] for ops.
func singleTenant(ops string) string {
	return "scope [operation] for " + ops + ": they are not authenticated and declare no tenant header, so all callers share one key space " +
		"and the server needs no idem.Config.Tenant (pass --scope tenant,operation if callers are tenants)\n"
}

func TestAnnotateStdout(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, 0o644)
	r := runCLI(t, "", "annotate", path)
	if r.code != ExitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, annotateSpec[:strings.Index(annotateSpec, "  /orders:")]) {
		t.Errorf("stdout does not start with the original text:\n%s", r.stdout)
	}
	for _, want := range []string{
		"        - $ref: '#/components/parameters/IdempotencyKey'\n      x-idempotency:\n        scope: [operation]\n    put:",
		"  title: CLI test   # a comment that must survive\n",
		"    IdempotencyKey:\n      name: Idempotency-Key\n      in: header\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "x-idempotency") != 2 {
		t.Errorf("want two x-idempotency, POST /orders and the multipart POST /files (PUT is not annotated by default):\n%s", r.stdout)
	}
	if want := "idemgen: annotate: " + path + ": " + singleTenant("2 operation(s) (POST /orders, POST /files)"); r.stderr != want {
		t.Errorf("stderr = %q\nwant     %q", r.stderr, want)
	}
	if data, _ := os.ReadFile(path); string(data) != annotateSpec {
		t.Error("the file changed without -w")
	}
}

// An operation annotate cannot annotate is named on stderr, file:line:col first, with why, and
// the exit status is 1: the document is not yet what the user asked for.
func TestAnnotateNamesWhatItSkips(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, 0o644)
	r := runCLI(t, "", "annotate", "--scope", "tenant,operation,path:id", path)
	if r.code != ExitFindings || r.stdout != annotateSpec {
		t.Fatalf("exit %d, stderr %s: want exit 1 and the document, unchanged, on stdout", r.code, r.stderr)
	}
	dir := path[:len(path)-len("openapi.yaml")]
	want := "idemgen: annotate: " + dir + strings.ReplaceAll(skipLines, "\nopenapi.yaml", "\nidemgen: annotate: "+dir+"openapi.yaml")
	if r.stderr != want {
		t.Errorf("stderr = %q\nwant     %q", r.stderr, want)
	}
}

func TestAnnotateDiff(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, 0o644)
	r := runCLI(t, "", "annotate", "--diff", "--no-problems", "--no-replayed-header", path)
	if r.code != ExitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	want := "--- " + path + "\n+++ " + path + `
@@ -13,6 +13,10 @@
       responses:
         '201':
           description: created
+      parameters:
+        - $ref: '#/components/parameters/IdempotencyKey'
+      x-idempotency:
+        scope: [operation]
     put:
       operationId: replaceOrders
       responses:
@@ -28,3 +32,18 @@
       responses:
         '201':
           description: stored
+      parameters:
+        - $ref: '#/components/parameters/IdempotencyKey'
+      x-idempotency:
+        scope: [operation]
+components:
+  parameters:
+    IdempotencyKey:
+      name: Idempotency-Key
+      in: header
+      description: 'A unique value (a UUID, say) that identifies this request. A retry with the same key gets the first outcome back instead of repeating it.'
+      required: true
+      schema:
+        type: string
+        minLength: 1
+        maxLength: 255
`
	if r.stdout != want {
		t.Errorf("diff:\n%s\nwant:\n%s", r.stdout, want)
	}
	if data, _ := os.ReadFile(path); string(data) != annotateSpec {
		t.Error("--diff changed the file")
	}
}

func TestAnnotateWrite(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, 0o600)
	r := runCLI(t, "", "annotate", "-w", "--methods", "post,put", "--ttl", "48h", "--exclude", "POST /files", path)
	if r.code != ExitOK || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if want := "idemgen: annotate: " + path + ": " + singleTenant("2 operation(s) (POST /orders, PUT /orders)") +
		"idemgen: annotate: " + path + ": 2 operation(s) annotated\n"; r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "x-idempotency:\n        ttl: 48h\n        scope: [operation]\n"); got != 2 {
		t.Errorf("want POST and PUT /orders with ttl 48h, found %d:\n%s", got, data)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600 kept", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	// A second run finds nothing to do and leaves the bytes alone.
	r = runCLI(t, "", "annotate", "-w", "--methods", "post,put", "--ttl", "48h", "--exclude", "POST /files", "--diff", path)
	if r.code != ExitOK || r.stdout != "" {
		t.Fatalf("second run: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
	if want := "idemgen: annotate: " + path + ": 0 operation(s) annotated\n"; r.stderr != want {
		t.Errorf("second run stderr = %q, want %q", r.stderr, want)
	}
	again, _ := os.ReadFile(path)
	if string(again) != string(data) {
		t.Error("second run changed the file")
	}

	// The result lints without errors (the multipart upload left alone is a warning) and
	// generates.
	r = runCLI(t, "", "lint", path)
	if r.code != ExitOK {
		t.Errorf("lint of the annotated file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "api")
	r = runCLI(t, "", "generate", "--package", "api", "--output", out, path)
	if r.code != ExitOK {
		t.Fatalf("generate from the annotated file: exit %d\n%s", r.code, r.stderr)
	}
	gen, err := os.ReadFile(filepath.Join(out, "idempotency.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	// Idempotent operations take the transaction.
	for _, op := range []string{"CreateOrder", "ReplaceOrders"} {
		if sig := op + "(ctx context.Context, tx pgx.Tx,"; !strings.Contains(string(gen), sig) {
			t.Errorf("idempotency.gen.go lacks %s…: the operation is not idempotent in the generated code", sig)
		}
	}
}

func TestAnnotateOperationsAndStdin(t *testing.T) {
	t.Parallel()
	r := runCLI(t, annotateSpec, "annotate", "--operations", "replaceOrders", "--storage", "marker", "--mismatch-status", "409", "-")
	if r.code != ExitOK || r.stderr != "idemgen: annotate: <stdin>: "+singleTenant("1 operation(s) (PUT /orders)") {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	want := "      responses:\n        '204':\n          description: replaced\n" +
		"          headers:\n            Idempotent-Replayed:\n              $ref: '#/components/headers/IdempotentReplayed'\n" +
		"        '400':\n          $ref: '#/components/responses/IdempotencyRefusal'\n" +
		"        '409':\n          $ref: '#/components/responses/IdempotencyRefusal'\n" +
		"        '503':\n          $ref: '#/components/responses/IdempotencyRefusal'\n" +
		"      parameters:\n        - $ref: '#/components/parameters/IdempotencyKey'\n" +
		"      x-idempotency:\n        storage: marker\n        scope: [operation]\n        mismatchStatus: 409\n  /files:"
	if !strings.Contains(r.stdout, want) || strings.Count(r.stdout, "x-idempotency") != 1 {
		t.Errorf("stdout:\n%s\nwant it to contain:\n%s", r.stdout, want)
	}
}

func TestAnnotateFailures(t *testing.T) {
	t.Parallel()
	path := writeSpec(t, 0o644)
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	lob, err := filepath.Abs("../annotate/testdata/corpus/lob/lob-api-bundled.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string // exact, or a prefix when it ends in "…"
	}{
		{"missing file", []string{"annotate", missing},
			"idemgen: " + missing + ": cannot read the spec: no such file or directory\n"},
		{"no argument", []string{"annotate"},
			"idemgen: annotate needs SPEC, the OpenAPI document to annotate (a file, or - for standard input)\nRun 'idemgen annotate --help' for usage.\n"},
		{"unknown flag", []string{"annotate", "--bogus", path},
			"idemgen: unknown flag --bogus\nRun 'idemgen annotate --help' for usage.\n"},
		{"bad storage", []string{"annotate", "--storage", "disk", path},
			`idemgen: annotate: --storage: "disk" is not a storage mode (use response, reference or marker)` + "\n"},
		{"bad ttl", []string{"annotate", "--ttl", "5x", path},
			`idemgen: annotate: --ttl: "5x" is not a duration (use e.g. 24h or 3d)` + "\n"},
		{"bad mismatch", []string{"annotate", "--mismatch-status", "abc", path},
			`idemgen: --mismatch-status: "abc" is not a whole number` + "\nRun 'idemgen annotate --help' for usage.\n"},
		{"unknown operation", []string{"annotate", "--operations", "createOrdr", path},
			"idemgen: " + path + `: --operations: no operation "createOrdr" in the document (use an operationId or "POST /path")` + "\n"},
		{"write stdin", []string{"annotate", "-w", "-"},
			"idemgen: annotate: -w needs a file, not standard input\n"},
		{"kin-openapi refuses", []string{"annotate", lob},
			"idemgen: " + lob + ": kin-openapi cannot load it (line 2417, column 19), fix the document first: …"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", tc.args...)
			if r.code != ExitUsage {
				t.Errorf("exit %d, want %d", r.code, ExitUsage)
			}
			if r.stdout != "" {
				t.Errorf("stdout = %q, want nothing", r.stdout)
			}
			if prefix, ok := strings.CutSuffix(tc.stderr, "…"); ok {
				if !strings.HasPrefix(r.stderr, prefix) || strings.Count(r.stderr, "\n") != 1 {
					t.Errorf("stderr = %q\nwant one line starting %q", r.stderr, prefix)
				}
			} else if r.stderr != tc.stderr {
				t.Errorf("stderr = %q\nwant     %q", r.stderr, tc.stderr)
			}
		})
	}
}

// TestAnnotateWriteFollowsSymlinks: -w on a link updates the file it points at and keeps the link.
func TestAnnotateWriteFollowsSymlinks(t *testing.T) {
	t.Parallel()
	target := writeSpec(t, 0o644)
	link := filepath.Join(t.TempDir(), "link.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "annotate", "-w", link); r.code != ExitOK {
		t.Fatalf("annotate -w link: exit %d, stderr %q", r.code, r.stderr)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.yaml is no longer a symbolic link (mode %v, err %v)", fi.Mode(), err)
	}
	got, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "x-idempotency") {
		t.Errorf("the file behind the link was not annotated:\n%s", got)
	}
}

// TestAnnotateChoosesScope: without --scope, and without a scope in the document's defaults,
// annotate writes [operation] for operations that have no tenants (no security, no tenant
// header), so that the server runs with idem.NewStore(pool, nil), keeps the secure default
// [tenant, operation] for the others, and says on stderr which it chose and why.
func TestAnnotateChoosesScope(t *testing.T) {
	t.Parallel()
	const op = `paths:
  /orders:
    post:
      operationId: createOrder
%s      responses:
        '201':
          description: created
`
	doc := func(root, opExtra string) string {
		return "openapi: 3.0.3\ninfo: {title: t, version: '1'}\n" + root + fmt.Sprintf(op, opExtra)
	}
	const tenantTail = ", so each tenant has its own keys and the server needs idem.Config.Tenant to say whose request it is (pass --scope operation if there is only one tenant)\n"
	for _, tc := range []struct {
		name, in string
		args     []string
		policy   string // what follows "x-idempotency:" in the output
		stderr   string
	}{
		{"no tenants", doc("", ""), nil, "\n        scope: [operation]\n",
			"idemgen: annotate: <stdin>: " + singleTenant("1 operation(s) (POST /orders)")},
		{"security at the root", doc("security: [{bearerAuth: []}]\ncomponents:\n  securitySchemes:\n    bearerAuth: {type: http, scheme: bearer}\n", ""), nil, " true\n",
			"idemgen: annotate: <stdin>: scope [tenant, operation] for 1 operation(s) (POST /orders): they are authenticated (security: bearerAuth)" + tenantTail},
		{"a scheme defined but not required", doc("components:\n  securitySchemes:\n    apiKey: {type: apiKey, in: header, name: X-Api-Key}\n", ""), nil, " true\n",
			"idemgen: annotate: <stdin>: scope [tenant, operation] for 1 operation(s) (POST /orders): they are authenticated (security: apiKey)" + tenantTail},
		{"anonymous operation", doc("security: [{bearerAuth: []}]\ncomponents:\n  securitySchemes:\n    bearerAuth: {type: http, scheme: bearer}\n", "      security: []\n"), nil, "\n        scope: [operation]\n",
			"idemgen: annotate: <stdin>: " + singleTenant("1 operation(s) (POST /orders)")},
		{"tenant header", doc("", "      parameters:\n        - {name: X-Tenant-ID, in: header, required: true, schema: {type: string}}\n"), nil, " true\n",
			"idemgen: annotate: <stdin>: scope [tenant, operation] for 1 operation(s) (POST /orders): they declare a tenant header (X-Tenant-ID)" + tenantTail},
		{"--scope decides", doc("", ""), []string{"--scope", "tenant,operation"}, " true\n", ""},
		{"the document's defaults decide", doc("x-idempotency: {scope: [operation]}\n", ""), nil, " true\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tc.in, append(append([]string{"annotate", "--no-problems", "--no-replayed-header"}, tc.args...), "-")...)
			if r.code != ExitOK {
				t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "      x-idempotency:"+tc.policy) {
				t.Errorf("stdout lacks x-idempotency:%q:\n%s", tc.policy, r.stdout)
			}
			if r.stderr != tc.stderr {
				t.Errorf("stderr = %q\nwant     %q", r.stderr, tc.stderr)
			}
		})
	}
}

// TestAnnotateSaysWhichErrorResponsesItKept: an operation's own 400 and 422 stay in place, and
// stderr names each with its place, the schema kept and the problem codes the runtime answers on
// that status; a 503 that already declares application/problem+json is not mentioned.
func TestAnnotateSaysWhichErrorResponsesItKept(t *testing.T) {
	t.Parallel()
	const doc = `openapi: 3.0.3
info: {title: kept, version: "1"}
paths:
  /payments:
    post:
      requestBody:
        content:
          application/json:
            schema: {type: object}
      responses:
        '201':
          description: created
        '400':
          $ref: '#/components/responses/BadRequest'
        '422':
          description: refused
          content:
            application/json:
              schema: {type: object}
        '503':
          description: down
          content:
            application/problem+json:
              schema: {type: object}
components:
  schemas:
    Error: {type: object}
  responses:
    BadRequest:
      description: bad
      content:
        application/json:
          schema: {$ref: '#/components/schemas/Error'}
`
	path := filepath.Join(t.TempDir(), "openapi.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "annotate", path)
	if r.code != ExitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	for _, want := range []string{
		path + ":13:9: POST /payments: responses.400: kept your schema Error (application/json); the runtime answers application/problem+json with codes key-missing, key-invalid, body-invalid, request-invalid on this status",
		path + ":15:9: POST /payments: responses.422: kept your application/json; the runtime answers application/problem+json with code key-reused on this status",
	} {
		if !strings.Contains(r.stderr, "idemgen: annotate: "+want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "responses.503") {
		t.Errorf("stderr mentions the 503, which already declares a problem:\n%s", r.stderr)
	}
	if !strings.Contains(r.stdout, "'400':\n          $ref: '#/components/responses/BadRequest'") {
		t.Errorf("the spec's own 400 was not kept:\n%s", r.stdout)
	}
	// The lint of the result agrees: the same two responses, as warnings.
	out := filepath.Join(filepath.Dir(path), "annotated.yaml")
	if err := os.WriteFile(out, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	l := runCLI(t, "", "lint", out)
	if got := strings.Count(l.stdout, "[error-response-not-problem]"); got != 2 {
		t.Errorf("lint of the annotated spec: %d error-response-not-problem warnings, want 2:\n%s", got, l.stdout)
	}
}

// TestAnnotateKeyPatternNotRE2: on a key header whose pattern is not RE2, annotate -w annotates
// the operations all the same, says once (not once per operation) what to write and where, and
// exits 1; generate refuses the result with the pattern's place until that line is written,
// then generates.
func TestAnnotateKeyPatternNotRE2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "openapi.yaml")
	in, err := os.ReadFile("../annotate/testdata/specs/key-pattern.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, in, 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "annotate", "-w", path)
	want := "idemgen: annotate: " + path + ":54:18: the key header x-idempotency-key's pattern '^(?!\\s)(.*)(\\S)$' is not RE2"
	fix := "add at the document's root: x-idempotency: {key: {pattern: '^\\S(.*\\S)?$'}}, the same keys written in RE2\n"
	if r.code != ExitFindings || strings.Count(r.stderr, "is not RE2") != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, fix) ||
		!strings.HasSuffix(r.stderr, path+": 3 operation(s) annotated, 1 left out\n") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, one line %q … %q, and 3 annotated, 1 left out", r.code, r.stderr, want, fix)
	}
	out := filepath.Join(dir, "api")
	r = runCLI(t, "", "generate", "--package", "api", "--output", out, path)
	if r.code == ExitOK || !strings.Contains(r.stderr, path+":88:18: POST /domestic-payment-consents: the key header x-idempotency-key's schema pattern") {
		t.Fatalf("generate before the fix: exit %d, stderr:\n%s\nwant a refusal at the pattern", r.code, r.stderr)
	}
	annotated, _ := os.ReadFile(path)
	if err := os.WriteFile(path, append([]byte("x-idempotency: {key: {pattern: '^\\S(.*\\S)?$'}}\n"), annotated...), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = runCLI(t, "", "generate", "--package", "api", "--output", out, path); r.code != ExitOK {
		t.Fatalf("generate with the line annotate asked for: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
