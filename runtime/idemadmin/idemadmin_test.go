package idemadmin_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

const (
	scriptTenant = "<script>alert(1)</script>"
	secretBody   = `{"card":"4242 4242 4242 4242"}`
)

type env struct {
	t      *testing.T
	schema *idemtest.Schema
	store  *idem.Store
	recent *idemadmin.Recent
}

func newEnv(t *testing.T) *env {
	t.Helper()
	s := idemtest.TestSchema(t, nil)
	recent := idemadmin.NewRecent(3)
	cfg := s.Config()
	cfg.Observer = recent.Observer()
	store, err := idem.NewStore(s.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return &env{t: t, schema: s, store: store, recent: recent}
}

func (e *env) do(tenant, key, op, fingerprint string, o *idem.Outcome) error {
	_, err := e.store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: op, Key: key, Operation: op, Fingerprint: fingerprint},
		func(context.Context, pgx.Tx) (*idem.Outcome, error) { return o, nil })
	return err
}

func (e *env) server(opts *idemadmin.Options) *httptest.Server {
	if opts == nil {
		opts = &idemadmin.Options{}
	}
	opts.Recent = e.recent
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv := httptest.NewServer(idemadmin.NewHandler(e.store, opts))
	e.t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, query url.Values) (*http.Response, string) {
	t.Helper()
	res, err := srv.Client().Get(srv.URL + "/?" + query.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func fact(t *testing.T, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`data-fact="` + name + `">(.*?)</`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no fact %q on the page:\n%s", name, body)
	}
	return m[1]
}

func TestPageRefusesEveryMethodButGetAndHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.do("acme", "k", "createPayment", "fp", &idem.Outcome{Status: 201}); err != nil {
		t.Fatal(err)
	}
	srv := e.server(nil)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, "PURGE"} {
		req, _ := http.NewRequest(m, srv.URL+"/?tenant=acme&key=k", strings.NewReader("tenant=acme&key=k"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q; want 405 and Allow: GET, HEAD", m, res.StatusCode, res.Header.Get("Allow"))
		}
	}
	var n int
	if err := e.schema.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.store.Table()).Scan(&n); err != nil || n != 1 {
		t.Errorf("keys after the refused requests: %d, %v; want the one key, untouched", n, err)
	}
	res, err := srv.Client().Head(srv.URL + "/?tenant=acme&key=k")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("HEAD: %v, %v", res, err)
	}
}

func TestPageHeadersAllowNothingButItsOwnStyle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	res, body := get(t, e.server(nil), nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d:\n%s", res.StatusCode, body)
	}
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no style element")
	}
	sum := sha256.Sum256([]byte(m[1]))
	want := "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
	for name, v := range map[string]string{
		"Content-Security-Policy": want, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
		"X-Frame-Options": "DENY", "Cache-Control": "no-store", "Content-Type": "text/html; charset=utf-8",
	} {
		if got := res.Header.Get(name); got != v {
			t.Errorf("%s: %q, want %q", name, got, v)
		}
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
		t.Errorf("the page has a script or loads something from elsewhere:\n%s", body)
	}
}

func TestPageEscapesAStoredScriptTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key := `"><img src=x onerror=alert(2)>`
	if err := e.do(scriptTenant, key, "createPayment", "fp", &idem.Outcome{Status: 201, Reference: `javascript:alert(3)`}); err != nil {
		t.Fatal(err)
	}
	srv := e.server(&idemadmin.Options{ReferenceURLs: map[string]string{"createPayment": "{reference}"}})
	for _, q := range []url.Values{
		{"tenant": {scriptTenant}, "key": {key}},
		{"key": {key}},
		{"hash": {idem.KeyHash("createPayment", key)}},
	} {
		res, body := get(t, srv, q)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%v: status %d", q, res.StatusCode)
		}
		if strings.Contains(body, "<script") || strings.Contains(body, "<img") || strings.Contains(body, `href="javascript:`) {
			t.Errorf("%v: markup from the key table is on the page as markup:\n%s", q, body)
		}
		if got := fact(t, body, "tenant"); got != "&lt;script&gt;alert(1)&lt;/script&gt;" {
			t.Errorf("%v: tenant shown as %q", q, got)
		}
	}
}

func TestPageShowsABodyOnlyWhenTheApplicationOptsIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.do("acme", "k", "createPayment", "fp", &idem.Outcome{Status: 201, Body: []byte(secretBody)}); err != nil {
		t.Fatal(err)
	}
	hash := idem.KeyHash("createPayment", "k")
	for _, q := range []url.Values{{"tenant": {"acme"}, "key": {"k"}}, {"hash": {hash}}, {"tenant": {"acme"}, "key": {"k"}, "body": {"1"}, "show_bodies": {"true"}}} {
		_, body := get(t, e.server(nil), q)
		if strings.Contains(body, "4242") {
			t.Errorf("%v: the body is on the page without Options.ShowBodies", q)
		}
		if got := fact(t, body, "body"); got != "30 bytes (not shown: bodies may hold personal data)" {
			t.Errorf("%v: body fact %q", q, got)
		}
	}
	_, body := get(t, e.server(&idemadmin.Options{ShowBodies: true}), url.Values{"hash": {hash}})
	if !strings.Contains(body, "<pre>{&#34;card&#34;:&#34;4242 4242 4242 4242&#34;}</pre>") {
		t.Errorf("with ShowBodies the body is not shown (escaped):\n%s", body)
	}
}

func TestPageShowsTheFactsStaleKeysAndMismatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	if err := e.do("acme", "cap-1", "capturePayment", "fp", &idem.Outcome{Status: 200, Reference: "pay 1/a"}); err != nil {
		t.Fatal(err)
	}
	for range 4 { // one more than the ring keeps
		if err := e.do("acme", "cap-1", "capturePayment", "other", nil); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("a different request with the key: %v, want ErrKeyReused", err)
		}
	}
	if _, err := e.schema.Pool.Exec(ctx, `INSERT INTO `+e.store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at)
		VALUES ('acme', 'createPayment', 'crashed', 'createPayment', 'fp', 'in_flight', gen_random_uuid(),
			now() - interval '5 minutes', now() + interval '1 day', now() - interval '10 minutes')`); err != nil {
		t.Fatal(err) // what a process that died holding the key leaves
	}
	srv := e.server(&idemadmin.Options{ReferenceURLs: map[string]string{"capturePayment": "/v1/payments/{reference}"}})

	res, body := get(t, srv, url.Values{"tenant": {"acme"}, "key": {"cap-1"}})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	for name, want := range map[string]string{
		"state": "complete", "attempts": "1", "status": "200 OK", "operation": "capturePayment",
		"reference": `<a href="/v1/payments/pay%201%2Fa" rel="noreferrer">pay 1/a`,
	} {
		if got := fact(t, body, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	hash := idem.KeyHash("capturePayment", "cap-1")
	if n := strings.Count(body, `<a href="?hash=`+hash+`">`+hash+`</a>`); n != 4 { // the key's own row and three mismatches
		t.Errorf("links to the key by its hash: %d, want 4 (its facts and the 3 mismatches kept)", n)
	}
	if !regexp.MustCompile(`(?s)<table id="stale">.*crashed.*</table>`).MatchString(body) || strings.Contains(body, `<p id="stale">None.`) {
		t.Errorf("the stale key is not listed:\n%s", body)
	}

	_, body = get(t, srv, url.Values{"tenant": {"acme"}, "key": {"crashed"}})
	if fact(t, body, "state") != "in_flight" || !strings.HasPrefix(fact(t, body, "state-note"), "(stale:") {
		t.Errorf("the stale key's state: %q %q", fact(t, body, "state"), fact(t, body, "state-note"))
	}

	res, body = get(t, srv, url.Values{"tenant": {"acme"}, "key": {"never"}})
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, `id="notice">No such key.`) {
		t.Errorf("unknown key: %d\n%s", res.StatusCode, body)
	}
	res, body = get(t, srv, url.Values{"hash": {"not-a-hash"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "That is not a key hash") {
		t.Errorf("bad hash: %d\n%s", res.StatusCode, body)
	}
}

func TestPageSaysWhenTheTableCannotBeRead(t *testing.T) {
	t.Parallel()
	s := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(s.Pool, &idem.Config{Schema: s.Name, Table: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(idemadmin.NewHandler(store, &idemadmin.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	res, body := get(t, srv, url.Values{"key": {"k"}})
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "could not be read") || strings.Contains(body, "nope") ||
		strings.Contains(body, "SQLSTATE") {
		t.Errorf("status %d; want 503 and no database text:\n%s", res.StatusCode, body)
	}
}

// TestPageSearchesOnlyTheTenantAsked: the same key under three tenants; a search that names a
// tenant shows that tenant's key alone (and none for a tenant without it), by its key or by its
// hash; an empty tenant field shows every tenant's.
func TestPageSearchesOnlyTheTenantAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	statuses := map[string]int{"acme": 201, "globex": 409, "initech": 422}
	for tenant, status := range statuses {
		if err := e.do(tenant, "shared-key", "createPayment", "fp-"+tenant, &idem.Outcome{Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	srv := e.server(nil)
	tenants := func(body string) []string {
		var got []string
		for _, m := range regexp.MustCompile(`data-fact="tenant">(.*?)</`).FindAllStringSubmatch(body, -1) {
			got = append(got, m[1])
		}
		return got
	}
	hash := idem.KeyHash("createPayment", "shared-key")
	for tenant, status := range statuses {
		for _, q := range []url.Values{
			{"tenant": {tenant}, "key": {"shared-key"}, "operation": {"createPayment"}},
			{"tenant": {tenant}, "hash": {hash}},
		} {
			res, body := get(t, srv, q)
			if got := tenants(body); res.StatusCode != http.StatusOK || len(got) != 1 || got[0] != tenant {
				t.Errorf("search %v: status %d, keys of tenants %q; want only %q's", q, res.StatusCode, got, tenant)
				continue
			}
			if got, want := fact(t, body, "status"), fmt.Sprintf("%d %s", status, http.StatusText(status)); got != want {
				t.Errorf("search %v: stored status %q, want %q (%s's)", q, got, want, tenant)
			}
		}
	}
	res, body := get(t, srv, url.Values{"tenant": {"umbrella"}, "key": {"shared-key"}})
	if got := tenants(body); res.StatusCode != http.StatusNotFound || len(got) != 0 {
		t.Errorf("a tenant without the key: status %d, keys of tenants %q; want 404 and none", res.StatusCode, got)
	}
	res, body = get(t, srv, url.Values{"tenant": {""}, "key": {"shared-key"}})
	got := tenants(body)
	slices.Sort(got)
	if res.StatusCode != http.StatusOK || !slices.Equal(got, []string{"acme", "globex", "initech"}) {
		t.Errorf("an empty tenant field: status %d, keys of tenants %q; want all three", res.StatusCode, got)
	}
}

// TestPageShowsAGoneKeysHistory: a key released after its handler failed has no row any more,
// but its history is kept: the page shows it as gone, with that history, by key and by hash.
func TestPageShowsAGoneKeysHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.store.Do(context.Background(), &idem.DoParams{Tenant: "acme", Scope: "createPayment", Key: "declined-1",
		Operation: "createPayment", Fingerprint: "fp", History: true},
		func(context.Context, pgx.Tx) (*idem.Outcome, error) { return nil, errors.New("card declined") })
	if err == nil {
		t.Fatal("the handler failed, and Do said nothing")
	}
	srv := e.server(nil)
	for _, q := range []url.Values{
		{"tenant": {"acme"}, "key": {"declined-1"}},
		{"hash": {idem.KeyHash("createPayment", "declined-1")}},
	} {
		res, body := get(t, srv, q)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%v: status %d\n%s", q, res.StatusCode, body)
		}
		if got := fact(t, body, "state"); got != "gone" {
			t.Errorf("%v: state %q, want gone", q, got)
		}
		if !strings.HasPrefix(fact(t, body, "state-note"), "(no key row any more") || strings.Contains(body, `data-fact="attempts"`) {
			t.Errorf("%v: a gone key's facts:\n%s", q, body)
		}
		if !strings.Contains(body, `<span data-event="kind">acquired</span>`) || !strings.Contains(body, `<span data-event="kind">released</span>`) ||
			!strings.Contains(body, "card declined") {
			t.Errorf("%v: the gone key's history is not on the page:\n%s", q, body)
		}
	}
	if res, body := get(t, srv, url.Values{"tenant": {"acme"}, "key": {"never"}}); res.StatusCode != http.StatusNotFound || !strings.Contains(body, `id="notice">No such key.`) {
		t.Errorf("a key never claimed: %d\n%s", res.StatusCode, body)
	}
}
