package annotate

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// annotateCase is one input document and one set of options, with a golden diff and stderr.
type annotateCase struct {
	name string
	file string // under testdata
	opts Options
	// rewrites lists cases whose additions must go into a construct written on one line (YAML
	// flow style, minified JSON, "{}"): only such lines may change.
	rewrites bool
}

var cases = []annotateCase{
	{name: "corpus-adyen", file: "corpus/adyen/CheckoutService-v71.json"},
	{name: "corpus-paypal", file: "corpus/paypal/checkout_orders_v2.json"},
	{name: "corpus-svix", file: "corpus/svix/server-openapi.json"},
	{name: "corpus-resend", file: "corpus/resend/resend.yaml"},
	{name: "corpus-twilio", file: "corpus/twilio/twilio_messaging_v1.yaml"},
	{name: "corpus-petstore", file: "corpus/oai-examples/petstore.yaml"},
	{name: "corpus-petstore-expanded", file: "corpus/oai-examples/petstore-expanded.yaml"},
	{name: "corpus-uspto", file: "corpus/oai-examples/uspto.yaml"},
	{name: "corpus-link", file: "corpus/oai-examples/link-example.yaml"},
	{name: "corpus-callback", file: "corpus/oai-examples/callback-example.yaml"},
	{name: "corpus-api-with-examples", file: "corpus/oai-examples/api-with-examples.yaml"},
	{name: "corpus-webhook", file: "corpus/oai-examples/webhook-example-3.1.json"},

	{name: "comments", file: "specs/comments.yaml"},
	{name: "anchors", file: "specs/anchors.yaml"},
	{name: "headers", file: "specs/headers.yaml"},
	{name: "crlf", file: "specs/crlf.yaml"},
	{name: "crlf-json", file: "specs/crlf.json"},
	{name: "flow", file: "specs/flow.yaml", rewrites: true},
	{name: "minified", file: "specs/minified.json", rewrites: true},
	{name: "tabs", file: "specs/tabs.json", rewrites: true},
	{name: "edges", file: "specs/edges.yaml"},
	{name: "edges-flags", file: "specs/edges.yaml", opts: Options{MismatchStatus: 409, Scope: []string{"tenant"}, Lease: "1m"}},
	{name: "empty-components", file: "specs/empty-components.yaml"},
	{name: "names-taken", file: "specs/names-taken.yaml"},
	{name: "one-operation", file: "specs/one-operation.yaml"},
	{name: "renderer-custom", file: "specs/renderer-custom.yaml"},
	{name: "renderer-custom-bare", file: "specs/renderer-custom-bare.yaml"},
	{name: "webhooks", file: "specs/webhooks.yaml"},

	{name: "comments-policy", file: "specs/comments.yaml", opts: Options{
		Methods: []string{"post", "patch", "delete"}, Exclude: []string{"updateOrder"},
		Storage: "marker", TTL: "3d", Claim: "transaction", MismatchStatus: 409, NoProblems: true,
	}},
	{name: "comments-reference", file: "specs/comments.yaml", opts: Options{
		Methods: []string{"post", "patch", "delete"}, Storage: "reference",
	}},
	{name: "comments-operations", file: "specs/comments.yaml", opts: Options{
		Operations: []string{"deleteOrder", "POST /orders"}, Lease: "30s", Wait: "2s",
	}},
	{name: "headers-scope", file: "specs/headers.yaml", opts: Options{
		Operations: []string{"pathLevelKey", "xKey", "PUT /pathlevel/{id}"},
		Scope:      []string{"tenant", "path:id"}, TTL: "48h", // 48h is the document's default
	}},
	{name: "petstore-bare", file: "corpus/oai-examples/petstore.yaml", opts: Options{
		NoKeyParam: true, NoProblems: true, NoReplayedHeader: true,
	}},
}

func TestAnnotate(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Annotate(tc.file, in, tc.opts)
			if err != nil {
				t.Fatalf("Annotate: %v", err)
			}
			diff, err := UnifiedDiff(tc.file, in, res.Output)
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			for _, s := range res.Skipped {
				stderr.WriteString(s.String() + "\n")
			}
			for _, c := range res.Scopes {
				stderr.WriteString(c.String() + "\n")
			}
			if u := UndeclaredSummary(tc.file, res.RefusalsUndeclared); u != "" {
				stderr.WriteString(u + "\n")
			}
			golden(t, tc.name+".diff", diff)
			golden(t, tc.name+".stderr", stderr.String())

			checkOnlyAdds(t, in, res.Output, tc.rewrites)
			checkCommentsSurvive(t, in, res.Output)

			again, err := Annotate(tc.file, res.Output, tc.opts)
			if err != nil {
				t.Fatalf("second run: %v", err)
			}
			if !bytes.Equal(again.Output, res.Output) || len(again.Annotated) != 0 {
				d, _ := UnifiedDiff(tc.file, res.Output, again.Output)
				t.Errorf("second run changed the document (annotated %v):\n%s", again.Annotated, d)
			}
			checkPolicies(t, res, tc.opts.NoKeyParam)
			if !tc.opts.NoKeyParam { // without the key header, the lint error is the expected outcome
				checkLint(t, tc.file, res.Output)
			}
		})
	}
}

// TestCorpusCoversTheDecisions pins what the corpus runs show, so a golden update that loses one
// of them does not go unnoticed.
func TestCorpusCoversTheDecisions(t *testing.T) {
	t.Parallel()
	run := func(file string, opts Options) (*Result, string) {
		t.Helper()
		in, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Annotate(file, in, opts)
		if err != nil {
			t.Fatal(err)
		}
		return res, string(res.Output)
	}
	// Adyen declares Idempotency-Key through $ref on most POSTs: no second header, no key field;
	// the PATCH without one reuses the document's own component.
	res, out := run("corpus/adyen/CheckoutService-v71.json", Options{})
	if strings.Contains(out, `"IdempotencyKey"`) || strings.Count(out, `"x-idempotency" : true`) != len(res.Annotated) {
		t.Error("adyen: added a second key header or a key field although Idempotency-Key is declared")
	}
	// svix spells it idempotency-key inline.
	_, out = run("corpus/svix/server-openapi.json", Options{})
	if !strings.Contains(out, `"header": "idempotency-key"`) || !strings.Contains(out, `"name": "idempotency-key"`) {
		t.Error("svix: the lower-case spelling is not used for the key and the added parameter")
	}
	// PayPal: PayPal-Request-Id through $ref.
	_, out = run("corpus/paypal/checkout_orders_v2.json", Options{})
	if !strings.Contains(out, `"header": "PayPal-Request-Id"`) || strings.Contains(out, `"IdempotencyKey"`) {
		t.Error("paypal: PayPal-Request-Id is not used as the key header")
	}
	// resend: its multipart upload is annotated like every other body (it is fingerprinted as sent).
	res, _ = run("corpus/resend/resend.yaml", Options{})
	if len(res.Skipped) != 0 || !slices.Contains(res.Annotated, "POST /contacts/imports") {
		t.Errorf("resend: skipped %v, annotated %v; want POST /contacts/imports annotated", res.Skipped, res.Annotated)
	}
}

func TestUnloadableSpec(t *testing.T) {
	t.Parallel()
	in, err := os.ReadFile("testdata/corpus/lob/lob-api-bundled.yml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Annotate("lob-api-bundled.yml", in, Options{})
	var ie *InputError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want an *InputError", err)
	}
	msg := err.Error()
	for _, want := range []string{"lob-api-bundled.yml: kin-openapi cannot load it (line 2417, column", "(and 10 more like it)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("message spans lines: %q", msg)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "spec.yaml: the file is empty"},
		{"not yaml", "openapi: [3.0\n", "spec.yaml: not valid YAML: yaml: line 1: did not find expected ',' or ']'"},
		{"bad json", `{"openapi": "3.0.0",}`, "spec.yaml: not valid JSON at line 1, column 21: expected a string key"},
		{"swagger 2", "swagger: '2.0'\ninfo: {title: t, version: '1'}\npaths: {}\n", `spec.yaml: not an OpenAPI 3 document (no "openapi: 3.x" field)`},
		{"scalar", "just text\n", "spec.yaml: the document is not a block mapping of OpenAPI fields"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Annotate("spec.yaml", []byte(tc.in), Options{})
			var ie *InputError
			if !errors.As(err, &ie) || err.Error() != tc.want {
				t.Errorf("err = %v\nwant   %s", err, tc.want)
			}
		})
	}
}

func TestBadOptions(t *testing.T) {
	t.Parallel()
	spec, err := os.ReadFile("testdata/specs/headers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Methods: []string{"fetch"}}, `--methods: "fetch" is not an HTTP method (use e.g. post,patch,put,delete)`},
		{Options{Storage: "disk"}, `--storage: "disk" is not a storage mode (use response, reference or marker)`},
		{Options{Claim: "lock"}, `--claim: "lock" is not a claim mode (use lease or transaction)`},
		{Options{TTL: "5x"}, `--ttl: "5x" is not a duration (use e.g. 24h or 3d)`},
		{Options{Lease: "0s"}, `--lease: "0s" must be positive (use e.g. 24h or 3d)`},
		{Options{Wait: "-1s"}, `--wait: "-1s" must be zero or positive (use e.g. 24h or 3d)`},
		{Options{Wait: "2m"}, "--wait: 2m is longer than the lease (1m): a duplicate would still be waiting when the first request's claim can be taken over (use a wait shorter than the lease)"},
		{Options{Wait: "40s", Lease: "30s"}, "--wait: 40s is longer than the lease (30s): a duplicate would still be waiting when the first request's claim can be taken over (use a wait shorter than the lease)"},
		{Options{MismatchStatus: 418}, "--mismatch-status: 418 is not allowed (use 422, 409 or 400)"},
		{Options{Scope: []string{"user"}}, `--scope: "user" is not a scope item (use tenant, operation, header:<Name> or path:<param>)`},
		{Options{Scope: []string{"tenant", "tenant"}}, `--scope: "tenant" is listed twice (remove one)`},
	} {
		_, err := Annotate("headers.yaml", spec, tc.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || err.Error() != tc.want {
			t.Errorf("%+v: err = %v\nwant %s", tc.opts, err, tc.want)
		}
	}
	// Unknown operation names are errors about the document's content.
	_, err = Annotate("headers.yaml", spec, Options{Operations: []string{"nope"}})
	if want := `headers.yaml: --operations: no operation "nope" in the document (use an operationId or "POST /path")`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
	_, err = Annotate("headers.yaml", spec, Options{Exclude: []string{"GET /files"}})
	if want := `headers.yaml: --exclude: no operation "GET /files" in the document (use an operationId or "POST /path")`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		d, _ := UnifiedDiff(name, want, []byte(got))
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", name, d)
	}
}

// lines splits text into lines without their endings, so that a last line that gains the line
// ending it lacked does not count as changed.
func lines(b []byte) []string {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// checkOnlyAdds asserts that every original line survives, in order: the input's lines are a
// subsequence of the output's, so the change only inserts lines (a greedy scan decides that
// exactly). With rewrites, a line written inline ({…} or […]) may change.
func checkOnlyAdds(t *testing.T, before, after []byte, rewrites bool) {
	t.Helper()
	out := lines(after)
	i := 0
	for _, l := range lines(before) {
		j := i
		for j < len(out) && out[j] != l {
			j++
		}
		if j == len(out) {
			if rewrites && strings.ContainsAny(l, "{[") {
				continue
			}
			t.Errorf("original line %q was changed, deleted or moved", l)
			return
		}
		i = j + 1
	}
}

// checkCommentsSurvive asserts that every comment line of the input is in the output, in order.
func checkCommentsSurvive(t *testing.T, before, after []byte) {
	t.Helper()
	out := lines(after)
	i := 0
	for _, l := range lines(before) {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		for i < len(out) && out[i] != l {
			i++
		}
		if i == len(out) {
			t.Errorf("comment line %q is lost or out of order", l)
			return
		}
		i++
	}
}

// checkPolicies loads the result with kin-openapi and checks, independently of the annotator's
// own reading, that every annotated operation carries x-idempotency and declares its key header.
func checkPolicies(t *testing.T, res *Result, noKeyParam bool) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(res.Output)
	if err != nil {
		t.Fatalf("kin-openapi cannot load the result: %v", err)
	}
	defHeader := "Idempotency-Key"
	if root, ok := doc.Extensions["x-idempotency"].(map[string]any); ok {
		if k, ok := root["key"].(map[string]any); ok {
			if h, ok := k["header"].(string); ok {
				defHeader = h
			}
		}
	}
	for _, route := range res.Annotated {
		method, path, _ := strings.Cut(route, " ")
		item := doc.Paths.Find(path)
		if item == nil {
			t.Errorf("%s: path missing from the result", route)
			continue
		}
		op := item.GetOperation(method)
		x, ok := op.Extensions["x-idempotency"]
		if !ok {
			t.Errorf("%s: reported as annotated but has no x-idempotency", route)
			continue
		}
		header := defHeader
		if m, ok := x.(map[string]any); ok && m["delivery"] != nil {
			continue // a webhook receiver: its key is the delivery id, declared by delivery
		}
		if m, ok := x.(map[string]any); ok {
			if k, ok := m["key"].(map[string]any); ok {
				header, _ = k["header"].(string)
			}
		}
		if header == "" || noKeyParam {
			continue
		}
		found := false
		for _, params := range []openapi3.Parameters{op.Parameters, item.Parameters} {
			for _, p := range params {
				if p.Value != nil && p.Value.In == "header" && strings.EqualFold(p.Value.Name, header) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("%s: key header %s is not declared on the operation or its path item", route, header)
		}
	}
}
