package routertest

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The cases of request validation (validate-request-body: true in every router's idemgen.yaml):
// a body that does not match its schema is answered 400 request-invalid naming the member,
// before anything is claimed, so no key row exists afterwards and the same key, with the body
// corrected, runs once.

// keyRows counts the key table's rows of tenant's key (the store's default table, in the
// schema the test pool's search_path names).
func (e *env) keyRows(t *testing.T, tenant, key string) int {
	t.Helper()
	var n int
	if err := e.b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE tenant = $1 AND key = $2`, tenant, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// invalid checks that a is a 400 request-invalid problem whose detail names field and carries
// no validator internals (kin-openapi's schema dump, Go type names), and, when pointer is set,
// whose errors list that JSON Pointer.
func (c *client) invalid(t *testing.T, what string, a answer, field, pointer string) {
	t.Helper()
	c.problem(t, what, a, http.StatusBadRequest, "request-invalid")
	var p struct {
		Detail string
		Errors []struct{ Pointer, Detail string }
	}
	if err := json.Unmarshal([]byte(a.Body), &p); err != nil {
		t.Errorf("%s on %s: the problem is not JSON: %v: %s", what, c.e.router, err, a.Body)
		return
	}
	if !strings.Contains(p.Detail, field) {
		t.Errorf("%s on %s: detail %q does not name %s", what, c.e.router, p.Detail, field)
	}
	if pointer != "" && !slices.ContainsFunc(p.Errors, func(e struct{ Pointer, Detail string }) bool { return e.Pointer == pointer }) {
		t.Errorf("%s on %s: errors %+v do not list %s", what, c.e.router, p.Errors, pointer)
	}
	for _, leak := range []string{"Schema:", "Value:", "Error at", "openapi3", "Go struct", "json: "} {
		if strings.Contains(p.Detail, leak) {
			t.Errorf("%s on %s: detail %q carries the validator's own text (%q)", what, c.e.router, p.Detail, leak)
		}
	}
}

var validationCases = []testCase{
	{"validation-refuses-before-the-claim", func(t *testing.T, e *env, c *client) {
		for _, v := range []struct{ what, body, field, pointer string }{
			{"a required member missing", `{"quantity": 2}`, `"item"`, "#/item"},
			{"an empty object", `{}`, `"quantity"`, "#/quantity"},
			{"a string under its minLength", `{"item": "", "quantity": 2}`, "/item", "#/item"},
			// The decoder refuses these before the schema is consulted; it names the member too.
			{"a value of the wrong type", `{"item": "tea", "quantity": "two"}`, "quantity", ""},
			{"a number where a string belongs", `{"item": 7, "quantity": 2}`, "item", ""},
		} {
			c.invalid(t, v.what, c.create(t, "k", v.body), v.field, v.pointer)
		}
		if o, k := e.orders(t, c.tenant), e.keyRows(t, c.tenant, "k"); o != 0 || k != 0 {
			t.Fatalf("%s: %d orders and %d key rows after invalid bodies, want 0 and 0 (validation runs before the claim)", e.router, o, k)
		}
		// The key was never bound: corrected, the same key executes once, and its retry replays.
		first := c.create(t, "k", orderBody)
		if first.Status != 201 || first.Replayed() {
			t.Fatalf("%s: the corrected body with the same key: %s, want a fresh 201", e.router, first)
		}
		again := c.create(t, "k", orderBody)
		if again.Status != 201 || !again.Replayed() || again.Body != first.Body {
			t.Errorf("%s: its retry: %s, want the first answer replayed", e.router, again)
		}
		if o, k := e.orders(t, c.tenant), e.keyRows(t, c.tenant, "k"); o != 1 || k != 1 {
			t.Errorf("%s: %d orders and %d key rows after a valid request and its retry, want 1 and 1", e.router, o, k)
		}
		if n := e.b.runs.Load(); n == 0 {
			t.Errorf("%s: the handler never ran", e.router)
		}
	}},
	{"validation-on-every-body", func(t *testing.T, e *env, c *client) {
		// addNote (marker storage, a uuid key) is validated like createOrder.
		const key = "0b6f3a52-8d4e-4f0a-9c1b-7e2d5a6c9f30"
		notes := "/v1/orders/" + c.tenant + "-n/notes"
		c.invalid(t, "a note without its text", c.send(t, http.MethodPost, notes, `{}`, key), `"text"`, "#/text")
		if n := e.keyRows(t, c.tenant, key); n != 0 {
			t.Fatalf("%s: %d key rows after an invalid note, want 0", e.router, n)
		}
		if a := c.send(t, http.MethodPost, notes, `{"text": "ring twice"}`, key); a.Status != 202 || a.Replayed() {
			t.Errorf("%s: the corrected note with the same key: %s, want a fresh 202", e.router, a)
		}
		if n := e.notes(t, c.tenant+"-n"); n != 1 {
			t.Errorf("%s: %d notes, want 1", e.router, n)
		}
	}},
}
