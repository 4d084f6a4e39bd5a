package idemadmin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemadmin"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// events is the history table beside the test's key table.
func (e *env) events() string {
	return pgx.Identifier{e.schema.Name, idem.HistoryTableName(e.schema.Table)}.Sanitize()
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.schema.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// uncertain writes what the runtime leaves when a claim of an uncertain-on-loss operation is
// lost after its provider call: the key uncertain, and its claim, provider call and loss in its
// history. Its expiry is 'infinity', as the runtime leaves it until the key is settled.
func (e *env) uncertain(tenant, key, op string) {
	e.t.Helper()
	e.exec(`INSERT INTO `+e.store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at, provider_at)
		VALUES ($1, $3, $2, $3, 'fp', 'uncertain', gen_random_uuid(), now() - interval '20 minutes', 'infinity',
			now() - interval '30 minutes', now() - interval '25 minutes')`, tenant, key, op)
	for i, ev := range []string{"acquired", "provider_call", "uncertain"} {
		e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, provider, provider_key, amount, currency)
			VALUES ($1, $3, $2, now() - make_interval(mins => 30 - 5 * $4), $5, $3, 1,
				CASE WHEN $5 = 'provider_call' THEN 'acquirer' END, CASE WHEN $5 = 'provider_call' THEN 'pk-' || $2 END,
				CASE WHEN $5 = 'provider_call' THEN 1500 END, CASE WHEN $5 = 'provider_call' THEN 'RUB' END)`,
			tenant, key, op, i, ev)
	}
}

// resolver lets the user the X-User header names resolve keys, except "viewer".
func resolver(r *http.Request) string {
	if u := r.Header.Get("X-User"); u != "viewer" {
		return u
	}
	return ""
}

// page GETs the page as user.
func page(t *testing.T, srv *httptest.Server, user string, q url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/?"+q.Encode(), nil)
	req.Header.Set("X-User", user)
	return send(t, srv, req)
}

func send(t *testing.T, srv *httptest.Server, req *http.Request) (int, string) {
	t.Helper()
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(b)
}

var tokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

// formToken is the token of the resolve form on body.
func formToken(t *testing.T, body string) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no resolve form on the page:\n%s", body)
	}
	return m[1]
}

// post sends the resolve form as user, from the page itself as a browser says it.
func post(t *testing.T, srv *httptest.Server, user string, form url.Values) (int, string) {
	t.Helper()
	return postWith(t, srv, user, form, http.Header{"Sec-Fetch-Site": {"same-origin"}})
}

func postWith(t *testing.T, srv *httptest.Server, user string, form url.Values, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/?hash="+form.Get("hash"), strings.NewReader(form.Encode()))
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-User", user)
	return send(t, srv, req)
}

// keyRow is the key's row: its state, status, body and Content-Type header, or state "gone".
func (e *env) keyRow(key string) (state string, status int, body, contentType string) {
	e.t.Helper()
	err := e.schema.Pool.QueryRow(context.Background(), `SELECT state, coalesce(status, 0), coalesce(convert_from(body, 'UTF8'), ''),
		coalesce(headers->'Content-Type'->>0, '') FROM `+e.store.Table()+` WHERE key = $1`, key).Scan(&state, &status, &body, &contentType)
	if err == pgx.ErrNoRows {
		return "gone", 0, "", ""
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return state, status, body, contentType
}

// resolvedRows are the resolved rows of key's history, as "actor|resolution: detail|status".
func (e *env) resolvedRows(key string) []string {
	e.t.Helper()
	rows, err := e.schema.Pool.Query(context.Background(), `SELECT actor || '|' || resolution || ': ' || detail || '|' || coalesce(status, 0) FROM `+e.events()+`
		WHERE key = $1 AND kind = 'resolved' ORDER BY at`, key)
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// noInternals fails when an answer carries Go, SQL or driver text.
func noInternals(t *testing.T, what, body string) {
	t.Helper()
	for _, s := range []string{"idem:", "SQLSTATE", "pgx", "ERROR:", "goroutine", ".go:", "relation "} {
		if strings.Contains(body, s) {
			t.Errorf("%s: the answer carries %q:\n%s", what, s, body)
		}
	}
}

func TestPageShowsTheKeyHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.do("acme", "pay-1", "createPayment", "fp", &idem.Outcome{Status: 201}); err != nil {
		t.Fatal(err)
	}
	for i, ev := range []struct{ kind, detail string }{
		{"acquired", ""}, {"taken_over", ""}, {"key_reused", "<script>alert(1)</script>"}, {"completed", ""},
	} {
		e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, status, detail)
			VALUES ('acme', 'createPayment', 'pay-1', now() - make_interval(mins => 10 - $1), $2, 'createPayment',
				CASE WHEN $2 = 'acquired' THEN 1 WHEN $2 <> 'key_reused' THEN 2 END, CASE WHEN $2 = 'completed' THEN 201 END, NULLIF($3, ''))`,
			i, ev.kind, ev.detail)
	}
	srv := e.server(nil)
	status, body := page(t, srv, "", url.Values{"hash": {idem.KeyHash("createPayment", "pay-1")}})
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	m := regexp.MustCompile(`(?s)<table class="history" id="history-[0-9a-f]{16}">(.*?)</table>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no history table:\n%s", body)
	}
	var kinds []string
	for _, k := range regexp.MustCompile(`data-event="kind">(\w+)<`).FindAllStringSubmatch(m[1], -1) {
		kinds = append(kinds, k[1])
	}
	if strings.Join(kinds, " ") != "acquired taken_over key_reused completed" {
		t.Errorf("timeline: %v, want claimed, taken over, a mismatch refused, completed, oldest first", kinds)
	}
	if strings.Contains(body, "<script>") || !strings.Contains(m[1], "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("the mismatch's detail is not escaped:\n%s", m[1])
	}
	if !strings.Contains(m[1], "<td>201 Created</td>") || !strings.Contains(m[1], "taken over: the previous holder&#39;s lease ran out") {
		t.Errorf("the timeline lacks the completion's status or the takeover's meaning:\n%s", m[1])
	}
	if strings.Contains(body, "<form method=\"post\"") {
		t.Errorf("a read-only page has a resolve form")
	}

	if err := e.do("acme", "cap-1", "capturePayment", "fp", &idem.Outcome{Status: 200, Reference: "pay_1"}); err != nil {
		t.Fatal(err)
	}
	_, body = page(t, srv, "", url.Values{"tenant": {"acme"}, "key": {"cap-1"}})
	if got := fact(t, body, "history"); !strings.HasPrefix(got, "None recorded: the operation keeps no history") {
		t.Errorf("a key without history: %q", got)
	}
}

func TestPageMarksAnUncertainKeyAndOffersTheFormOnlyWhenAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	q := url.Values{"tenant": {"acme"}, "key": {"pay-9"}}
	for _, c := range []struct {
		name     string
		opts     *idemadmin.Options
		user     string
		wantForm bool
	}{
		{"read-only page", nil, "alice", false},
		{"a user who may only look", &idemadmin.Options{Resolve: resolver}, "viewer", false},
		{"a user who may resolve", &idemadmin.Options{Resolve: resolver}, "alice", true},
	} {
		status, body := page(t, e.server(c.opts), c.user, q)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d", c.name, status)
		}
		if fact(t, body, "state") != "uncertain" || !strings.Contains(body, `<span class="state-uncertain" data-fact="state">`) ||
			!strings.Contains(fact(t, body, "state-note"), "retries are refused until the key is settled") {
			t.Errorf("%s: the uncertain state is not marked:\n%s", c.name, body)
		}
		if !strings.Contains(body, "provider acquirer, key pk-pay-9; 1500 RUB (minor units)") {
			t.Errorf("%s: the provider call is not in the timeline", c.name)
		}
		if !regexp.MustCompile(`<th>Uncertain</th>.*\n<tr><td>createPayment</td>(<td>\d+</td>){4}<td>—</td><td class="stale">1</td><td>2[45]m`).MatchString(body) {
			t.Errorf("%s: the statistics do not count the uncertain key:\n%s", c.name, body)
		}
		if has := tokenRE.MatchString(body); has != c.wantForm {
			t.Errorf("%s: resolve form shown %v, want %v", c.name, has, c.wantForm)
		}
		if c.wantForm && !strings.Contains(body, "Resolve this uncertain key, as alice") {
			t.Errorf("%s: the form does not say who resolves", c.name)
		}
	}
	// Not uncertain: no form, even for a user who may resolve.
	if err := e.do("acme", "pay-1", "createPayment", "fp", &idem.Outcome{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if _, body := page(t, e.server(&idemadmin.Options{Resolve: resolver}), "alice", url.Values{"tenant": {"acme"}, "key": {"pay-1"}}); tokenRE.MatchString(body) {
		t.Errorf("a complete key has a resolve form")
	}
}

func TestResolveFormSettlesAsCompleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash := idem.KeyHash("createPayment", "pay-9")
	_, body := page(t, srv, "alice", url.Values{"hash": {hash}})
	form := url.Values{"hash": {hash}, "token": {formToken(t, body)}, "as": {"completed"}, "status": {"201"},
		"content_type": {"application/json"}, "body": {`{"id":"pay_9"}`}, "evidence": {"acquirer charge ch_91, 15.00 RUB"}}
	status, body := post(t, srv, "alice", form)
	if status != http.StatusOK || !strings.Contains(body, `id="done">Resolved as completed, by alice`) {
		t.Fatalf("status %d, want 200 saying it resolved:\n%s", status, body)
	}
	if st, code, b, ct := e.keyRow("pay-9"); st != "complete" || code != 201 || b != `{"id":"pay_9"}` || ct != "application/json" {
		t.Errorf("key row: %s %d %q %q; want complete with the outcome given", st, code, b, ct)
	}
	if got := e.resolvedRows("pay-9"); len(got) != 1 || got[0] != "alice|completed: acquirer charge ch_91, 15.00 RUB|201" {
		t.Errorf("resolved history rows: %q", got)
	}
	if fact(t, body, "state") != "complete" || !strings.Contains(body, `<tr class="ev-resolved">`) || tokenRE.MatchString(body) {
		t.Errorf("the answer does not show the key complete, its resolved event, and no form:\n%s", body)
	}

	// The same form again: the key is settled.
	status, body = post(t, srv, "alice", form)
	if status != http.StatusConflict || !strings.Contains(body, "the key is no longer uncertain") {
		t.Errorf("posting again: %d, want 409 saying it is settled:\n%s", status, body)
	}
	if got := e.resolvedRows("pay-9"); len(got) != 1 {
		t.Errorf("resolved rows after a second post: %q", got)
	}
}

func TestResolveFormSettlesAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash := idem.KeyHash("createPayment", "pay-9")
	_, body := page(t, srv, "bob", url.Values{"hash": {hash}})
	status, body := post(t, srv, "bob", url.Values{"hash": {hash}, "token": {formToken(t, body)}, "as": {"failed"},
		"evidence": {"acquirer: no such charge"}, "status": {"201"}})
	if status != http.StatusOK || !strings.Contains(body, "Resolved as failed, by bob") || strings.Contains(body, "No such key") {
		t.Fatalf("status %d, want 200 saying it resolved as failed:\n%s", status, body)
	}
	if st, _, _, _ := e.keyRow("pay-9"); st != "gone" {
		t.Errorf("key row after failed: %s, want it deleted", st)
	}
	if got := e.resolvedRows("pay-9"); len(got) != 1 || got[0] != "bob|failed: acquirer: no such charge|0" {
		t.Errorf("resolved history rows: %q", got)
	}
}

func TestResolveFormRefusesCrossSiteRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash := idem.KeyHash("createPayment", "pay-9")
	_, body := page(t, srv, "alice", url.Values{"hash": {hash}})
	form := url.Values{"hash": {hash}, "token": {formToken(t, body)}, "as": {"failed"}, "evidence": {"x"}}
	host := strings.TrimPrefix(srv.URL, "http://")
	for name, h := range map[string]http.Header{
		"no browser headers":          {},
		"cross-site":                  {"Sec-Fetch-Site": {"cross-site"}, "Origin": {"http://" + host}},
		"same-site":                   {"Sec-Fetch-Site": {"same-site"}},
		"a top-level navigation":      {"Sec-Fetch-Site": {"none"}},
		"another origin":              {"Origin": {"http://evil.example"}},
		"another port":                {"Origin": {"http://" + strings.Split(host, ":")[0] + ":1"}},
		"origin null":                 {"Origin": {"null"}},
		"same origin but cross-site?": {"Origin": {"http://" + host}, "Sec-Fetch-Site": {"cross-site"}},
	} {
		status, body := postWith(t, srv, "alice", form, h)
		if status != http.StatusForbidden || !strings.Contains(body, "accepted only from this page") {
			t.Errorf("%s: %d, want 403:\n%s", name, status, body)
		}
	}
	if st, _, _, _ := e.keyRow("pay-9"); st != "uncertain" {
		t.Fatalf("after the refused requests the key is %s", st)
	}
	// A browser without Sec-Fetch-Site that names this page's origin is let through.
	if status, body := postWith(t, srv, "alice", form, http.Header{"Origin": {"http://" + host}}); status != http.StatusOK {
		t.Errorf("a same-origin POST with Origin alone: %d:\n%s", status, body)
	}
}

func TestResolveFormNeedsItsTokenAndAUserWhoMayResolve(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	e.uncertain("acme", "pay-8", "createPayment")
	e.uncertain("globex", "pay-9", "createPayment") // the same key hash, another tenant
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash9, hash8 := idem.KeyHash("createPayment", "pay-9"), idem.KeyHash("createPayment", "pay-8")
	_, body := page(t, srv, "alice", url.Values{"tenant": {"acme"}, "hash": {hash9}})
	tok := formToken(t, body)
	_, body = page(t, srv, "alice", url.Values{"tenant": {"acme"}, "hash": {hash8}})
	tok8 := formToken(t, body)
	// Another server (another secret) minted this one.
	_, body = page(t, e.server(&idemadmin.Options{Resolve: resolver}), "alice", url.Values{"tenant": {"acme"}, "hash": {hash9}})
	foreign := formToken(t, body)
	for name, c := range map[string]struct {
		user, hash, token string
		want              int
	}{
		"no token":                    {"alice", hash9, "", http.StatusForbidden},
		"a forged token":              {"alice", hash9, "9999999999.AAAA", http.StatusForbidden},
		"another key's token":         {"alice", hash9, tok8, http.StatusForbidden},
		"the token of another user":   {"mallory", hash9, tok, http.StatusForbidden},
		"another process's token":     {"alice", hash9, foreign, http.StatusForbidden},
		"a user who may only look":    {"viewer", hash9, tok, http.StatusForbidden},
		"a token moved to another id": {"alice", hash8, tok, http.StatusForbidden},
	} {
		status, body := post(t, srv, c.user, url.Values{"hash": {c.hash}, "token": {c.token}, "as": {"failed"}, "evidence": {"x"}})
		if status != c.want {
			t.Errorf("%s: %d, want %d:\n%s", name, status, c.want, body)
		}
		noInternals(t, name, body)
	}
	if st, _, _, _ := e.keyRow("pay-8"); st != "uncertain" {
		t.Errorf("pay-8 is %s after the refused posts", st)
	}
	var n int
	if err := e.schema.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.store.Table()+` WHERE state = 'uncertain'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("uncertain keys after the refused posts: %d, %v; want 3", n, err)
	}
	// Each tenant's token settles its own pay-9 alone, whichever sorts first: globex's (listed
	// second) first, then acme's.
	left := func() []string {
		rows, _ := e.schema.Pool.Query(context.Background(), `SELECT tenant FROM `+e.store.Table()+` WHERE key = 'pay-9' ORDER BY tenant`)
		tenants, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return tenants
	}
	_, body = page(t, srv, "alice", url.Values{"tenant": {"globex"}, "hash": {hash9}})
	tokGlobex := formToken(t, body)
	if status, body := post(t, srv, "alice", url.Values{"hash": {hash9}, "token": {tokGlobex}, "as": {"failed"}, "evidence": {"x"}}); status != http.StatusOK {
		t.Fatalf("globex's token: %d:\n%s", status, body)
	}
	if tenants := left(); len(tenants) != 1 || tenants[0] != "acme" {
		t.Errorf("pay-9 rows left after globex's form: %v; want acme's alone", tenants)
	}
	if status, body := post(t, srv, "alice", url.Values{"hash": {hash9}, "token": {tok}, "as": {"failed"}, "evidence": {"x"}}); status != http.StatusOK {
		t.Fatalf("acme's token: %d:\n%s", status, body)
	}
	if tenants := left(); len(tenants) != 0 {
		t.Errorf("pay-9 rows left after acme's form: %v; want none", tenants)
	}
}

func TestResolveFormChecksWhatItIsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash := idem.KeyHash("createPayment", "pay-9")
	_, body := page(t, srv, "alice", url.Values{"hash": {hash}})
	tok := formToken(t, body)
	for name, c := range map[string]struct {
		form url.Values
		want string
	}{
		"no evidence":             {url.Values{"as": {"failed"}, "evidence": {"  "}}, "the evidence is required"},
		"no resolution":           {url.Values{"evidence": {"x"}}, "choose completed"},
		"completed without it":    {url.Values{"as": {"completed"}, "evidence": {"x"}}, "needs the HTTP status"},
		"a status out of range":   {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"700"}, "no_body": {"1"}}, "needs the HTTP status"},
		"a status and no outcome": {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}}, "needs one of"},
		"body and reference":      {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "body": {"{}"}, "reference": {"r"}}, "needs one of"},
		"a content type alone":    {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "reference": {"r"}, "content_type": {"text/plain"}}, "a content type goes with a body"},
		"a bad content type":      {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "body": {"{}"}, "content_type": {"json!!"}}, "not a media type"},
		"too much evidence":       {url.Values{"as": {"failed"}, "evidence": {strings.Repeat("x", 4001)}}, "over 4000 bytes"},
		"a 500":                   {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"500"}, "body": {"{}"}}, "never a 5xx"},
		"a 103":                   {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"103"}, "no_body": {"1"}}, "needs the HTTP status"},
		"a 201 with no body":      {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "no_body": {"1"}}, "a 201 answers with a body"},
		"CR LF in the type": {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "body": {"{}"},
			"content_type": {"application/json\r\nSet-Cookie: a=b"}}, "not a media type"},
		"a NUL in the type": {url.Values{"as": {"completed"}, "evidence": {"x"}, "status": {"201"}, "body": {"{}"},
			"content_type": {"application/json; charset=\"a\x00\""}}, "not a media type"},
	} {
		c.form.Set("hash", hash)
		c.form.Set("token", tok)
		status, body := post(t, srv, "alice", c.form)
		if status != http.StatusBadRequest || !regexp.MustCompile(`id="refused">Nothing was resolved: [^<]*`+regexp.QuoteMeta(c.want)).MatchString(body) {
			t.Errorf("%s: %d, want 400 saying %q:\n%s", name, status, c.want, body)
		}
		noInternals(t, name, body)
		if ev := c.form.Get("evidence"); strings.TrimSpace(ev) != "" && len(ev) < 100 && !strings.Contains(body, `name="evidence" required maxlength="4000">`+ev+`</textarea>`) {
			t.Errorf("%s: the form is not filled again with what was sent", name)
		}
	}
	if st, _, _, _ := e.keyRow("pay-9"); st != "uncertain" {
		t.Errorf("after refused forms the key is %s", st)
	}

	// Not a form, or too big a one.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(`{"as":"failed"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("X-User", "alice")
	if status, _ := send(t, srv, req); status != http.StatusUnsupportedMediaType {
		t.Errorf("a JSON body: %d, want 415", status)
	}
	big := url.Values{"hash": {hash}, "token": {tok}, "as": {"completed"}, "status": {"201"}, "evidence": {"x"},
		"body": {strings.Repeat("b", idemadmin.MaxResolveForm)}}
	if status, body := post(t, srv, "alice", big); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a form over MaxResolveForm: %d, want 413:\n%.300s", status, body)
	}
	if st, _, _, _ := e.keyRow("pay-9"); st != "uncertain" {
		t.Errorf("after refused forms the key is %s", st)
	}
	// Other methods are still refused, naming POST now.
	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/", nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD, POST" {
		t.Errorf("PUT: %d, Allow %q", res.StatusCode, res.Header.Get("Allow"))
	}
}

// TestResolveFormConcurrently: two operators resolve the same key at once, one as completed,
// one as failed; exactly one wins, the other is told the key is settled.
func TestResolveFormConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.uncertain("acme", "pay-9", "createPayment")
	srv := e.server(&idemadmin.Options{Resolve: resolver})
	hash := idem.KeyHash("createPayment", "pay-9")
	forms := map[string]url.Values{}
	for user, as := range map[string]string{"alice": "completed", "bob": "failed"} {
		_, body := page(t, srv, user, url.Values{"hash": {hash}})
		forms[user] = url.Values{"hash": {hash}, "token": {formToken(t, body)}, "as": {as}, "status": {"204"}, "no_body": {"1"}, "evidence": {"by " + user}}
	}
	if forms["bob"].Del("status"); true {
		forms["bob"].Del("no_body")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	start := make(chan struct{})
	for user, form := range forms {
		wg.Go(func() {
			<-start
			status, body := post(t, srv, user, form)
			noInternals(t, user, body)
			mu.Lock()
			statuses[status]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if statuses[http.StatusOK] != 1 || statuses[http.StatusConflict] != 1 {
		t.Errorf("statuses %v, want one 200 and one 409", statuses)
	}
	if got := e.resolvedRows("pay-9"); len(got) != 1 {
		t.Errorf("resolved rows: %q, want exactly one", got)
	}
}

func TestResolveFormHidesTheDatabase(t *testing.T) {
	t.Parallel()
	s := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(s.Pool, &idem.Config{Schema: s.Name, Table: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	srv := httptest.NewServer(idemadmin.NewHandler(store, &idemadmin.Options{Resolve: resolver, Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)
	status, body := post(t, srv, "alice", url.Values{"hash": {"0123456789abcdef"}, "token": {"1.x"}, "as": {"failed"}, "evidence": {"x"}})
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "could not be read, so nothing was resolved") {
		t.Errorf("status %d; want 503 saying nothing was resolved:\n%s", status, body)
	}
	noInternals(t, "a missing table", body)
	if strings.Contains(body, "nope") {
		t.Errorf("the answer names the table:\n%s", body)
	}
}
