package payments

// The support page in a real browser: headless Chromium opens the example's
// /admin/idempotency against a real PostgreSQL schema holding a completed, an in-flight, a stale,
// a mismatched and an uncertain key, searches keys, and the test reads the facts and the key's
// history from the DOM Chromium rendered, then settles the uncertain key through the page's
// resolve form. Two screenshots are written as test artifacts (go test -artifacts keeps them): a
// key's page with its history, and an uncertain key's with the resolve form; with
// -update-screenshot they also replace docs/support-page.png (which the README shows) and
// docs/support-page-uncertain.png.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the support page's screenshot to docs/support-page.png")

const supportToken = "test-admin-token"

func TestSupportPageInABrowser(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	ctx := context.Background()
	schema := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 8})
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	recent := idemadmin.NewRecent(0)
	cfg := schema.Config()
	cfg.Observer = recent.Observer()
	h, store, err := newService(schema.Pool, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(withSupportPage(h, store, recent, supportToken))
	t.Cleanup(srv.Close)

	// A completed payment and a completed capture (stored by reference).
	var pay struct {
		PaymentID string `json:"payment_id"`
	}
	post(t, srv, "/v1/payments", "key-pay-1", `{"amount_minor":1500,"currency":"RUB"}`, 201, &pay)
	post(t, srv, "/v1/payments/"+pay.PaymentID+"/capture", "key-capture-1", "", 200, nil)
	// The same key with a different request: a mismatch (key-reused).
	post(t, srv, "/v1/payments", "key-pay-1", `{"amount_minor":9900,"currency":"RUB"}`, 422, nil)
	// A refund whose handler is still running when the browser looks.
	holdKey(t, store, "acme", "key-refund-1", "refundPayment")
	// What a server that died mid-request leaves: in flight, its lease run out.
	if _, err := schema.Pool.Exec(ctx, `INSERT INTO `+store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at)
		VALUES ('acme', 'crashed', 'key-crashed-1', 'createPayment', 'fp', 'in_flight', gen_random_uuid(),
			now() - interval '4 minutes', now() + interval '1 day', now() - interval '5 minutes')`); err != nil {
		t.Fatal(err)
	}

	// key-pay-1's history, as the runtime writes it for an operation that keeps one: claimed,
	// lost to a crash (its holder's lease ran out), taken over by a retry, a different request
	// with the key refused, completed. Written directly: the example's operations do not keep a
	// history yet.
	payKeys, err := store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: ptrTo("acme"), Key: "key-pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	payKey := payKeys[0]
	events := pgx.Identifier{schema.Name, idem.HistoryTableName(schema.Table)}.Sanitize()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := schema.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`DELETE FROM `+events+` WHERE tenant = $1 AND scope = $2 AND key = $3`, payKey.Tenant, payKey.Scope, payKey.Key)
	for _, ev := range []struct {
		ago             string
		kind            string
		attempt, status int
		detail          string
	}{
		{"7 minutes", "acquired", 1, 0, ""},
		{"4 minutes", "taken_over", 2, 0, "the lease of attempt 1 ran out: its process stopped"},
		{"3 minutes", "key_reused", 0, 0, "a different request: amount_minor 9900"},
		{"2 minutes", "completed", 2, 201, ""},
	} {
		exec(`INSERT INTO `+events+` (tenant, scope, key, at, kind, operation, attempt, status, detail)
			VALUES ($1, $2, $3, now() - $4::interval, $5, 'createPayment', NULLIF($6, 0), NULLIF($7, 0), NULLIF($8, ''))`,
			payKey.Tenant, payKey.Scope, payKey.Key, ev.ago, ev.kind, ev.attempt, ev.status, ev.detail)
	}
	exec(`UPDATE `+store.Table()+` SET attempt = 2 WHERE tenant = $1 AND scope = $2 AND key = $3`, payKey.Tenant, payKey.Scope, payKey.Key)
	// A payment whose attempt was lost after it called the acquirer: uncertain, waiting for an
	// operator. Written directly, as the runtime leaves it (its expiry, 'infinity' there, is a
	// century here: LookupKey cannot read 'infinity' yet).
	exec(`INSERT INTO `+store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at, provider_at, attempt)
		VALUES ('acme', $1, 'key-pay-lost', 'createPayment', 'fp', 'uncertain', gen_random_uuid(),
			now() - interval '9 minutes', 'infinity', now() - interval '12 minutes', now() - interval '11 minutes', 1)`, payKey.Scope)
	for _, ev := range []struct{ ago, kind string }{{"12 minutes", "acquired"}, {"11 minutes", "provider_call"}, {"9 minutes", "uncertain"}} {
		exec(`INSERT INTO `+events+` (tenant, scope, key, at, kind, operation, attempt, detail, provider, provider_key, amount, currency)
			VALUES ('acme', $1, 'key-pay-lost', now() - $2::interval, $3, 'createPayment', 1,
				CASE WHEN $3 = 'uncertain' THEN 'its process stopped after the acquirer was called' END,
				CASE WHEN $3 = 'provider_call' THEN 'acquirer' END, CASE WHEN $3 = 'provider_call' THEN 'pay_7c1e:acquirer' END,
				CASE WHEN $3 = 'provider_call' THEN 4200 END, CASE WHEN $3 = 'provider_call' THEN 'RUB' END)`,
			payKey.Scope, ev.ago, ev.kind)
	}

	base := strings.Replace(srv.URL, "http://", "http://admin:"+supportToken+"@", 1) + supportPath
	search := func(q url.Values) string { return base + "?" + q.Encode() }

	// The search form's GET: tenant and key, as support types them.
	dom := browse(t, chromium, search(url.Values{"tenant": {"acme"}, "key": {"key-capture-1"}, "operation": {""}, "hash": {""}}))
	for name, want := range map[string]string{
		"key": "key-capture-1", "tenant": "acme", "operation": "capturePayment", "state": "complete",
		"attempts": "1", "status": "200 OK", "body": "none",
		"reference": `<a href="/v1/payments/` + pay.PaymentID + `" rel="noreferrer">` + pay.PaymentID + `</a>`,
	} {
		if got := domFact(t, dom, name); got != want {
			t.Errorf("capture key, %s: %q, want %q", name, got, want)
		}
	}
	if !regexp.MustCompile(`(?s)<table id="stale">.*key-crashed-1.*</table>`).MatchString(dom) {
		t.Errorf("the stale key is not in the stale list:\n%s", dom)
	}
	if regexp.MustCompile(`(?s)<table id="stale">.*key-refund-1.*</table>`).MatchString(dom) {
		t.Errorf("the key whose handler is running is listed as stale")
	}
	// The mismatch is listed by its key hash, which links to the key it reused.
	hash := payKey.KeyHash
	if !regexp.MustCompile(`(?s)<table id="mismatches">.*createPayment.*<a href="\?hash=` + hash + `">` + hash + `</a>`).MatchString(dom) {
		t.Errorf("the mismatch of key-pay-1 (%s) is not listed:\n%s", hash, dom)
	}
	for op, want := range map[string]string{"createPayment": "1 1 1 1", "refundPayment": "1 0 0 0", "capturePayment": "0 0 1 0"} {
		m := regexp.MustCompile(`<tr><td>` + op + `</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>\d+</td><td>[^<]*</td><td[^>]*>(\d+)</td>`).FindStringSubmatch(dom)
		if m == nil || strings.Join(m[1:], " ") != want {
			t.Errorf("%s's keys (in flight, stale, complete, uncertain): %v, want %s", op, m, want)
		}
	}

	// Following the mismatch's hash, as support would from the list or from a log line.
	dom = browse(t, chromium, search(url.Values{"hash": {hash}}))
	for name, want := range map[string]string{"key": "key-pay-1", "state": "complete", "status": "201 Created", "attempts": "2"} {
		if got := domFact(t, dom, name); got != want {
			t.Errorf("key by hash, %s: %q, want %q", name, got, want)
		}
	}
	// Its history, oldest first.
	if got := domEvents(dom); got != "acquired taken_over key_reused completed" {
		t.Errorf("key-pay-1's timeline: %q, want claimed, taken over, a mismatch refused, completed", got)
	}
	if !strings.Contains(dom, "a different request: amount_minor 9900") {
		t.Errorf("the refused mismatch's detail is not in the timeline")
	}
	if got := domFact(t, dom, "body"); !strings.HasSuffix(got, "bytes (not shown: bodies may hold personal data)") {
		t.Errorf("the body fact without the opt-in: %q", got)
	}

	// Without the admin's password there is no page.
	res, err := http.Get(srv.URL + supportPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the page without credentials: %d, want 401", res.StatusCode)
	}

	// The uncertain key: marked, its provider call in the timeline, and the resolve form.
	lostURL := search(url.Values{"tenant": {"acme"}, "key": {"key-pay-lost"}})
	dom = browse(t, chromium, lostURL)
	if got := domFact(t, dom, "state"); got != "uncertain" {
		t.Errorf("the lost payment's state: %q, want uncertain", got)
	}
	if got := domEvents(dom); got != "acquired provider_call uncertain" {
		t.Errorf("the lost payment's timeline: %q", got)
	}
	if !strings.Contains(dom, "provider acquirer, key pay_7c1e:acquirer; 4200 RUB (minor units)") ||
		!strings.Contains(dom, "Resolve this uncertain key, as admin") || !strings.Contains(dom, `<form method="post" action="" class="resolve"`) {
		t.Errorf("the uncertain key's page lacks its provider call or the resolve form:\n%s", dom)
	}

	shots := map[string]string{
		"support-page.png":           search(url.Values{"tenant": {"acme"}, "key": {"key-pay-1"}}),
		"support-page-uncertain.png": lostURL,
	}
	for name, u := range shots {
		shot := filepath.Join(t.ArtifactDir(), name)
		screenshot(t, chromium, u, shot)
		if *updateScreenshot {
			b, err := os.ReadFile(shot)
			if err == nil {
				err = os.WriteFile(filepath.Join("..", "..", "docs", name), b, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// The form the browser rendered, sent as the browser sends it (Chromium without a script
	// cannot press the button): the admin settles the payment as completed.
	token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(dom)
	if token == nil {
		t.Fatal("no token in the resolve form")
	}
	lost, err := store.LookupKey(ctx, &idem.LookupKeyParams{Tenant: ptrTo("acme"), Key: "key-pay-lost"})
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"hash": {lost[0].KeyHash}, "token": {token[1]}, "as": {"completed"}, "status": {"201"},
		"content_type": {"application/json"}, "body": {`{"payment_id":"pay_7c1e","status":"authorized"}`},
		"evidence": {"acquirer record ch_7c1e: authorized 42.00 RUB"}}
	for _, withAuth := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+supportPath, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if withAuth {
			req.SetBasicAuth("admin", supportToken)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch {
		case !withAuth && res.StatusCode != http.StatusUnauthorized:
			t.Errorf("the resolve form without credentials: %d, want 401", res.StatusCode)
		case withAuth && (res.StatusCode != http.StatusOK || !strings.Contains(string(b), "Resolved as completed, by admin")):
			t.Errorf("the resolve form: %d, want 200 saying it resolved:\n%s", res.StatusCode, b)
		}
	}
	var actor, detail, resolution string
	if err := schema.Pool.QueryRow(ctx, `SELECT actor, detail, resolution FROM `+events+` WHERE key = 'key-pay-lost' AND kind = 'resolved'`).Scan(&actor, &detail, &resolution); err != nil ||
		actor != "admin" || resolution != "completed" || detail != "acquirer record ch_7c1e: authorized 42.00 RUB" {
		t.Errorf("the resolved history row: actor %q, resolution %q, detail %q, %v; want admin, completed and the evidence", actor, resolution, detail, err)
	}
	dom = browse(t, chromium, lostURL)
	if got := domFact(t, dom, "state"); got != "complete" || !strings.Contains(dom, `data-event="kind">resolved<`) {
		t.Errorf("after resolving, the key is %q and its timeline is %q", got, domEvents(dom))
	}
}

// domEvents lists the kinds of the timeline's events, oldest first.
func domEvents(dom string) string {
	var kinds []string
	for _, m := range regexp.MustCompile(`data-event="kind">(\w+)<`).FindAllStringSubmatch(dom, -1) {
		kinds = append(kinds, m[1])
	}
	return strings.Join(kinds, " ")
}

func ptrTo(s string) *string { return &s }

// needChromium installs Debian's chromium through scripts/deps.sh when it is missing and
// returns its path.
func needChromium(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("../../scripts/deps.sh", "chromium").CombinedOutput(); err != nil {
		t.Fatalf("scripts/deps.sh chromium: %v\n%s", err, out)
	}
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("scripts/deps.sh chromium succeeded, but no chromium is on the PATH or in /usr/bin")
	return ""
}

// chromiumFlags run a fresh, quiet headless browser that contacts nothing but the page (as
// root it needs --no-sandbox).
func chromiumFlags(t *testing.T) []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir()}
}

func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, append(chromiumFlags(t), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("chromium did not finish within 90s: %s", strings.Join(args, " "))
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, lastLines(stderr.String(), 10))
	}
	return out
}

// browse returns the DOM Chromium rendered for url.
func browse(t *testing.T, chromium, url string) string {
	t.Helper()
	dom := string(runChromium(t, chromium, "--dump-dom", url))
	if !strings.Contains(dom, "<h1>Payments: idempotency keys</h1>") {
		t.Fatalf("chromium did not render the support page for %s:\n%s", url, dom)
	}
	return dom
}

func screenshot(t *testing.T, chromium, url, file string) {
	t.Helper()
	runChromium(t, chromium, "--window-size=1200,1240", "--screenshot="+file, url)
	b, err := os.ReadFile(file)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("chromium wrote no PNG screenshot to %s: %v", file, err)
	}
	t.Logf("screenshot of the support page: %s (%d bytes)", file, len(b))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func domFact(t *testing.T, dom, name string) string {
	t.Helper()
	m := regexp.MustCompile(`data-fact="` + name + `">(.*?)</(td|span)>`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no %q fact in the rendered page:\n%s", name, dom)
	}
	return m[1]
}

// post sends an idempotent request as tenant acme and decodes a JSON answer into into.
func post(t *testing.T, srv *httptest.Server, path, key, body string, want int, into any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(tenantHeader, "acme")
	req.Header.Set("Idempotency-Key", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("POST %s (key %s): %d, want %d: %s", path, key, res.StatusCode, want, b)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("POST %s: %v: %s", path, err, b)
		}
	}
}

// holdKey claims key through the example's store and keeps its handler running until the test
// ends.
func holdKey(t *testing.T, store *idem.Store, tenant, key, op string) {
	t.Helper()
	claimed, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: op, Key: key, Operation: op, Fingerprint: "fp", Lease: time.Minute},
			func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				close(claimed)
				<-release
				return nil, errors.New("released when the test ends")
			})
	}()
	t.Cleanup(func() { close(release); <-finished })
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		t.Fatal(fmt.Sprintf("the handler holding %s did not start within 10s", key))
	}
}
