package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// keysEnv is a key table holding one key of each kind support meets: completed (with a body and
// a reference), in flight with a live handler, stale (its holder died), and one with a hostile
// tenant and key.
type keysEnv struct {
	t     *testing.T
	s     *idemtest.Schema
	store *idem.Store
	base  []string // --database-url, --schema, --table
}

const (
	hostileTenant = "<script>alert(1)</script>\x1b[2J"
	hostileKey    = "k\n\x07<b>bold</b>\u202e"
)

func newKeysEnv(t *testing.T) *keysEnv {
	t.Helper()
	s := idemtest.TestSchema(t, nil)
	store, err := idem.NewStore(s.Pool, s.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	e := &keysEnv{t: t, s: s, store: store, base: []string{"--database-url", s.URL, "--schema", s.Name, "--table", s.Table}}
	e.complete("acme", "pay-1", "createPayment", &idem.Outcome{Status: 201, Header: http.Header{"Location": {"/v1/payments/pay_1"}}, Body: []byte(`{"id":"pay_1","card":"4242"}`)})
	e.complete("acme", "cap-1", "capturePayment", &idem.Outcome{Status: 200, Reference: "pay_1"})
	e.complete(hostileTenant, hostileKey, "createPayment", &idem.Outcome{Status: 201, Body: []byte("<i>x</i>")})
	e.hold("acme", "pay-2", "createPayment")
	if _, err := s.Pool.Exec(context.Background(), `INSERT INTO `+store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at)
		VALUES ('acme', 'createPayment', 'pay-3', 'createPayment', 'fp', 'in_flight', gen_random_uuid(),
			now() - interval '5 minutes', now() + interval '1 day', now() - interval '10 minutes')`); err != nil {
		t.Fatal(err) // what a process that died holding the key leaves: in flight, lease gone
	}
	return e
}

func (e *keysEnv) complete(tenant, key, op string, o *idem.Outcome) {
	e.t.Helper()
	res, err := e.store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: op, Key: key, Operation: op, Fingerprint: "fp"},
		func(context.Context, pgx.Tx) (*idem.Outcome, error) { return o, nil })
	if err != nil || !res.Persisted {
		e.t.Fatalf("complete %q: %+v, %v", key, res, err)
	}
}

// hold keeps key in flight under a live handler until the test ends.
func (e *keysEnv) hold(tenant, key, op string) {
	e.t.Helper()
	claimed, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = e.store.Do(context.Background(), &idem.DoParams{Tenant: tenant, Scope: op, Key: key, Operation: op, Fingerprint: "fp", Lease: time.Minute},
			func(context.Context, pgx.Tx) (*idem.Outcome, error) {
				close(claimed)
				<-release
				return nil, errors.New("released when the test ends")
			})
	}()
	e.t.Cleanup(func() { close(release); <-finished })
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		e.t.Fatalf("the handler holding %q did not start within 10s", key)
	}
}

func (e *keysEnv) run(args ...string) (int, string, string) {
	return runMain("", append(args, e.base...)...)
}

// field returns the value of a "name  value" line of keys show.
func field(t *testing.T, out, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `  +(.*)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", name, out)
	}
	return m[1]
}

func TestKeysShowText(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	code, out, stderr := e.run("keys", "show", "--tenant", "acme", "--key", "pay-1")
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for name, want := range map[string]string{
		"key": `"pay-1"`, "tenant": `"acme"`, "operation": "createPayment", "state": "complete", "attempts": "1",
		"status": "201", "header": `"Location": "/v1/payments/pay_1"`, "key hash": idem.KeyHash("createPayment", "pay-1"),
		"body": "28 bytes (pass --body to print it; it may hold personal data)",
	} {
		if got := field(t, out, name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"created", "completed", "expires"} {
		if got := field(t, out, name); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT[\d:.]+Z \((\S+ ago|in \S+)\)$`).MatchString(got) {
			t.Errorf("%s: %q, want a UTC time and how long ago", name, got)
		}
	}
	if strings.Contains(out, "4242") {
		t.Errorf("the body is printed without --body:\n%s", out)
	}

	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-1", "--body")
	if got := field(t, out, "body"); got != `"{\"id\":\"pay_1\",\"card\":\"4242\"}"` {
		t.Errorf("--body: body %s", got)
	}

	_, out, _ = e.run("keys", "show", "--key", "cap-1")
	if field(t, out, "reference") != `"pay_1"` || field(t, out, "operation") != "capturePayment" {
		t.Errorf("a reference key:\n%s", out)
	}

	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-3")
	if st := field(t, out, "state"); !strings.HasPrefix(st, "in_flight (stale") {
		t.Errorf("abandoned key: state %q, want in_flight (stale…)", st)
	}
	if le := field(t, out, "lease expires"); !strings.HasSuffix(le, "ago)") {
		t.Errorf("abandoned key: lease expires %q, want a time in the past", le)
	}
	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-2")
	if st := field(t, out, "state"); st != "in_flight (its handler is running)" {
		t.Errorf("held key: state %q", st)
	}
}

func TestKeysShowByHashAndJSON(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	hash := idem.KeyHash("createPayment", "pay-1")
	code, out, stderr := e.run("keys", "show", "--hash", strings.ToUpper(hash), "--json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var keys []map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 1 {
		t.Fatalf("output is not one key as JSON: %v\n%s", err, out)
	}
	k := keys[0]
	for name, want := range map[string]any{
		"tenant": "acme", "key": "pay-1", "operation": "createPayment", "key_hash": hash, "state": "complete",
		"stale": false, "attempt": 1.0, "status": 201.0, "reference": nil, "body_size": 28.0, "lease_expires_at": nil,
	} {
		if got := k[name]; got != want {
			t.Errorf("%s = %#v, want %#v", name, got, want)
		}
	}
	if _, ok := k["body"]; ok {
		t.Errorf("JSON has the body without --body: %s", out)
	}
	for _, name := range []string{"created_at", "completed_at", "expires_at", "now"} {
		if _, err := time.Parse(time.RFC3339Nano, k[name].(string)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	_, out, _ = e.run("keys", "show", "--hash", hash, "--json", "--body")
	if !strings.Contains(out, `"body": "{\"id\":\"pay_1\",\"card\":\"4242\"}"`) {
		t.Errorf("--json --body does not carry the body:\n%s", out)
	}
	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-3", "--json")
	if !strings.Contains(out, `"stale": true`) || !strings.Contains(out, `"lease_expires_at": "`) {
		t.Errorf("stale key as JSON:\n%s", out)
	}
}

func TestKeysShowNoSuchKey(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	for _, args := range [][]string{
		{"keys", "show", "--tenant", "acme", "--key", "never"},
		{"keys", "show", "--tenant", "globex", "--key", "pay-1"},
		{"keys", "show", "--key", "pay-1", "--operation", "refundPayment"},
		{"keys", "show", "--hash", "0123456789abcdef", "--json"},
	} {
		code, out, stderr := e.run(args...)
		if code != ExitFindings || out != "" || !strings.HasPrefix(stderr, "idemgen: no such key: ") ||
			strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, e.s.Name+"."+e.s.Table) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and one line saying there is no such key in the table", args, code, out, stderr)
		}
	}
}

func TestKeysPrintHostileTenantsAndKeysEscaped(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	check := func(what, out string) {
		t.Helper()
		if strings.ContainsAny(out, "\x1b\x07\u202e<>") {
			t.Errorf("%s prints a control character or markup as it is:\n%q", what, out)
		}
	}
	code, out, stderr := e.run("keys", "show", "--tenant", hostileTenant, "--key", hostileKey, "--body")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	check("show", out)
	if got, want := field(t, out, "tenant"), `"\u003cscript\u003ealert(1)\u003c/script\u003e\x1b[2J"`; got != want {
		t.Errorf("tenant %s, want %s", got, want)
	}
	if got, want := field(t, out, "key"), `"k\n\a\u003cb\u003ebold\u003c/b\u003e\u202e"`; got != want {
		t.Errorf("key %s, want %s", got, want)
	}
	_, out, _ = e.run("keys", "show", "--tenant", hostileTenant, "--key", hostileKey, "--json", "--body")
	check("show --json", out)
	var keys []struct{ Tenant, Key, Body string }
	if err := json.Unmarshal([]byte(out), &keys); err != nil || keys[0].Tenant != hostileTenant || keys[0].Key != hostileKey || keys[0].Body != "<i>x</i>" {
		t.Errorf("JSON does not round-trip the hostile values: %v %+v", err, keys)
	}
	for _, args := range [][]string{{"keys", "list"}, {"keys", "list", "--json"}, {"keys", "show", "--tenant", "<x>\x1b", "--key", "\x1b"}} {
		_, out, stderr := e.run(args...)
		check(strings.Join(args, " "), out+stderr)
	}
}

func TestKeysList(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	code, out, stderr := e.run("keys", "list", "--state", "in_flight", "--stale")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "CREATED ") || !strings.Contains(lines[1], `"pay-3"`) ||
		!strings.Contains(lines[1], "in_flight (stale)") || !strings.Contains(lines[1], idem.KeyHash("createPayment", "pay-3")) {
		t.Errorf("--stale lists:\n%s", out)
	}

	_, out, _ = e.run("keys", "list", "--operation", "createPayment", "--tenant", "acme", "--json")
	var keys []struct {
		Key   string `json:"key"`
		State string `json:"state"`
		Stale bool   `json:"stale"`
	}
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatal(err, out)
	}
	var got []string
	for _, k := range keys {
		got = append(got, k.Key+"/"+k.State)
	}
	// Newest first: pay-3's row was created ten minutes ago.
	if strings.Join(got, " ") != "pay-2/in_flight pay-1/complete pay-3/in_flight" {
		t.Errorf("list --operation createPayment --tenant acme: %v", got)
	}

	_, out, _ = e.run("keys", "list", "--since", "1m", "--limit", "2", "--json")
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 2 {
		t.Errorf("--since 1m --limit 2: %v\n%s", err, out)
	}
	code, out, stderr = e.run("keys", "list", "--operation", "nothing")
	if code != ExitOK || out != "" || !strings.Contains(stderr, "no keys") {
		t.Errorf("empty list: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if _, out, _ = e.run("keys", "list", "--operation", "nothing", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("empty list as JSON: %q, want []", out)
	}
	for _, args := range [][]string{
		{"keys", "list", "--state", "done"}, {"keys", "list", "--stale", "--state", "complete"},
		{"keys", "list", "--limit", "0"}, {"keys", "list", "--since", "yesterday"},
	} {
		if code, _, stderr := e.run(args...); code != ExitUsage || !strings.HasPrefix(stderr, "idemgen: keys list: --") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming the flag", args, code, stderr)
		}
	}
}

func TestKeysStats(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	code, out, stderr := e.run("keys", "stats")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n")[1:] {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f[1:]
		}
	}
	// in flight, stale, complete, expired, then the oldest in flight
	if got := strings.Join(rows["createPayment"][:4], " "); got != "2 1 2 0" {
		t.Errorf("createPayment: %s, want 2 1 2 0\n%s", got, out)
	}
	if got := strings.Join(rows["capturePayment"][:5], " "); got != "0 0 1 0 -" {
		t.Errorf("capturePayment: %s, want 0 0 1 0 -\n%s", got, out)
	}
	if got := strings.Join(rows["(all)"][:4], " "); got != "2 1 3 0" || !strings.HasSuffix(strings.Join(rows["(all)"], " "), " ago) 0 -") {
		t.Errorf("(all): %v\n%s", rows["(all)"], out)
	}

	_, out, _ = e.run("keys", "stats", "--json")
	var st struct {
		Table string
		Total struct {
			InFlight              int64    `json:"in_flight"`
			Stale                 int64    `json:"stale_in_flight"`
			OldestInFlightSeconds *float64 `json:"oldest_in_flight_seconds"`
		}
		Operations []struct{ Operation string }
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err, out)
	}
	if st.Table != e.s.Name+"."+e.s.Table || st.Total.InFlight != 2 || st.Total.Stale != 1 || len(st.Operations) != 2 ||
		st.Total.OldestInFlightSeconds == nil || *st.Total.OldestInFlightSeconds < 9*60 {
		t.Errorf("stats --json: %+v\n%s", st, out)
	}
}

func TestKeysWrongSchemaOrTable(t *testing.T) {
	t.Parallel()
	s := idemtest.TestSchema(t, nil)
	for _, args := range [][]string{
		{"keys", "stats", "--schema", "no_such_schema"},
		{"keys", "show", "--key", "k", "--schema", s.Name, "--table", "nope"},
		{"keys", "list", "--schema", s.Name, "--table", "nope", "--json"},
	} {
		code, out, stderr := runMain("", append(args, "--database-url", s.URL)...)
		if code != ExitUsage || out != "" || !strings.Contains(stderr, "there is no key table") ||
			!strings.Contains(stderr, "check --schema and --table") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line naming --schema and --table", args, code, out, stderr)
		}
	}
}

func TestKeysWithoutADatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, args := range [][]string{{"keys", "stats"}, {"keys", "list"}, {"keys", "show", "--key", "k"}} {
		code, out, stderr := runMain("", args...)
		if code != ExitUsage || out != "" || !strings.Contains(stderr, "no database: pass --database-url or set DATABASE_URL") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	code, _, stderr := runMain("", "keys", "stats", "--database-url", "postgres://nobody@/db?host=/nonexistent-idemgen-socket-dir&connect_timeout=2")
	if code != ExitUsage || !strings.Contains(stderr, "cannot reach PostgreSQL") {
		t.Errorf("unreachable: exit %d, stderr %q", code, stderr)
	}
	for _, args := range [][]string{{"keys", "show"}, {"keys", "show", "--key", "k", "--hash", "0123456789abcdef"}, {"keys", "show", "--hash", "xyz"}} {
		if code, _, stderr := runMain("", args...); code != ExitUsage || !strings.HasPrefix(stderr, "idemgen: keys show: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 before connecting", args, code, stderr)
		}
	}
}

// events is the history table beside the test's key table.
func (e *keysEnv) events() string {
	return pgx.Identifier{e.s.Name, idem.HistoryTableName(e.s.Table)}.Sanitize()
}

// exec runs sql on the test's schema or fails.
func (e *keysEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.s.Pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// makeUncertain turns a key uncertain as the runtime does when a claim of an uncertain-on-loss
// operation is lost after its provider call: written directly, the transition is the runtime's.
// The runtime leaves such a key's expiry at 'infinity' until it is settled.
func (e *keysEnv) makeUncertain(tenant, key, op string) {
	e.t.Helper()
	e.exec(`INSERT INTO `+e.store.Table()+`
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, created_at, provider_at)
		VALUES ($1, $3, $2, $3, 'fp', 'uncertain', gen_random_uuid(), now() - interval '20 minutes', 'infinity',
			now() - interval '30 minutes', now() - interval '25 minutes')`, tenant, key, op)
	e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, provider, provider_key, amount, currency)
		VALUES ($1, $3, $2, now() - interval '25 minutes', 'provider_call', $3, 1, 'acquirer', 'pk-'||$2, 1500, 'RUB')`, tenant, key, op)
	e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, detail)
		VALUES ($1, $3, $2, now() - interval '20 minutes', 'uncertain', $3, 1, 'lease_lost')`, tenant, key, op)
}

func TestKeysShowHistory(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	// pay-1's history as the runtime writes it: claimed, lost to a crash, taken over, a
	// mismatch refused, completed, replayed.
	for i, row := range []struct {
		kind, detail string
		attempt      int
		status       int
		replays      int
	}{
		{"acquired", "", 1, 0, 0}, {"taken_over", "", 2, 0, 0}, {"key_reused", "fingerprint <other>\x1b", 0, 0, 0},
		{"completed", "", 2, 201, 0}, {"replayed", "", 0, 0, 3},
	} {
		e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, status, detail, replays)
			VALUES ('acme', 'createPayment', 'pay-1', now() - make_interval(mins => 10 - $1), $2, 'createPayment',
				NULLIF($3, 0), NULLIF($4, 0), NULLIF($5, ''), NULLIF($6, 0))`, i, row.kind, row.attempt, row.status, row.detail, row.replays)
	}
	code, out, stderr := e.run("keys", "show", "--tenant", "acme", "--key", "pay-1")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	_, timeline, ok := strings.Cut(out, "\nhistory (5 events, oldest first)\n")
	if !ok {
		t.Fatalf("no history below the key:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(timeline), "\n")
	want := []string{
		`^TIME +EVENT +ATTEMPT +STATUS +DETAILS$`,
		`^\S+Z +acquired +1 +- +-$`,
		`^\S+Z +taken_over +2 +- +-$`,
		`^\S+Z +key_reused +- +- +"fingerprint \\u003cother\\u003e\\x1b"$`,
		`^\S+Z +completed +2 +201 +-$`,
		`^\S+Z +replayed +- +- +3 replays$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("history has %d lines, want %d:\n%s", len(lines), len(want), timeline)
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("history line %d: %q, want %s", i, lines[i], re)
		}
	}

	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-1", "--json")
	var keys []struct {
		History []struct {
			At      time.Time `json:"at"`
			Kind    string    `json:"kind"`
			Attempt *int      `json:"attempt"`
			Status  *int      `json:"status"`
			Detail  *string   `json:"detail"`
			Replays *int      `json:"replays"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 1 || len(keys[0].History) != 5 {
		t.Fatalf("--json: %v, want one key with 5 events:\n%s", err, out)
	}
	h := keys[0].History
	if h[0].Kind != "acquired" || *h[0].Attempt != 1 || h[0].Status != nil || h[3].Kind != "completed" || *h[3].Status != 201 ||
		*h[2].Detail != "fingerprint <other>\x1b" || *h[4].Replays != 3 || !h[0].At.Before(h[4].At) {
		t.Errorf("--json history: %s", out)
	}

	// A key whose operation keeps no history says so, and why.
	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "cap-1")
	if got := field(t, out, "history"); !strings.HasPrefix(got, "none recorded: its operation keeps no history") || !strings.Contains(got, "retention") {
		t.Errorf("a key without history: %q", got)
	}
	if _, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "cap-1", "--json"); !strings.Contains(out, `"history": []`) {
		t.Errorf("a key without history as JSON has no empty history:\n%s", out)
	}
}

// TestKeysShowGoneKey: a key with no row any more (released after a failure) whose history is
// kept is shown as gone, with its history, in text and JSON; by key and by hash.
func TestKeysShowGoneKey(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	for i, kind := range []string{"acquired", "released"} {
		e.exec(`INSERT INTO `+e.events()+` (tenant, scope, key, at, kind, operation, attempt, detail)
			VALUES ('acme', 'createPayment', 'failed-1', now() - make_interval(mins => 10 - $1), $2, 'createPayment', 1,
				CASE WHEN $2 = 'released' THEN 'handler error: declined' END)`, i, kind)
	}
	for _, args := range [][]string{
		{"keys", "show", "--tenant", "acme", "--key", "failed-1"},
		{"keys", "show", "--hash", idem.KeyHash("createPayment", "failed-1")},
	} {
		code, out, stderr := e.run(args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %q; want the gone key shown", args, code, stderr)
		}
		if got := field(t, out, "state"); !strings.HasPrefix(got, "gone (no key row") {
			t.Errorf("%v: state %q; want gone", args, got)
		}
		if !strings.Contains(out, "history (2 events, oldest first)") || !strings.Contains(out, "handler error: declined") {
			t.Errorf("%v: no history below the gone key:\n%s", args, out)
		}
	}
	_, out, _ := e.run("keys", "show", "--tenant", "acme", "--key", "failed-1", "--json")
	var keys []struct {
		State     string            `json:"state"`
		Operation string            `json:"operation"`
		ExpiresAt *time.Time        `json:"expires_at"`
		History   []json.RawMessage `json:"history"`
	}
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 1 || keys[0].State != "gone" ||
		keys[0].Operation != "createPayment" || keys[0].ExpiresAt != nil || len(keys[0].History) != 2 {
		t.Errorf("--json of a gone key: %v\n%s", err, out)
	}
}

func TestKeysShowUncertainKey(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.makeUncertain("acme", "pay-9", "createPayment")
	code, out, stderr := e.run("keys", "show", "--tenant", "acme", "--key", "pay-9")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if got := field(t, out, "expires"); got != "not until it is settled" {
		t.Errorf("expires %q", got)
	}
	if st := field(t, out, "state"); !strings.HasPrefix(st, "uncertain (") || !strings.Contains(st, "idemgen keys resolve") {
		t.Errorf("state %q: want uncertain, pointing at keys resolve", st)
	}
	if !regexp.MustCompile(`(?m)^\S+Z +provider_call +1 +- +provider acquirer key "pk-pay-9"; amount 1500 RUB \(minor units\)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\S+Z +uncertain +1 +- +"lease_lost"$`).MatchString(out) {
		t.Errorf("the provider call and the uncertain event are not in the history:\n%s", out)
	}
	_, out, _ = e.run("keys", "show", "--tenant", "acme", "--key", "pay-9", "--json")
	if !strings.Contains(out, `"provider_key": "pk-pay-9"`) || !strings.Contains(out, `"amount": 1500`) || !strings.Contains(out, `"currency": "RUB"`) {
		t.Errorf("the provider call as JSON:\n%s", out)
	}
}

func TestKeysListAndStatsUncertain(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.makeUncertain("acme", "pay-9", "createPayment")
	code, out, stderr := e.run("keys", "stats", "--json")
	if code != ExitOK {
		t.Fatalf("stats: exit %d, stderr %q", code, stderr)
	}
	var st struct {
		Total struct {
			Uncertain              int64      `json:"uncertain"`
			OldestUncertain        *time.Time `json:"oldest_uncertain"`
			OldestUncertainSeconds *float64   `json:"oldest_uncertain_seconds"`
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Total.Uncertain != 1 || st.Total.OldestUncertain == nil ||
		*st.Total.OldestUncertainSeconds < 24*60 {
		t.Errorf("stats --json: %v %+v\n%s", err, st, out)
	}
	_, out, _ = e.run("keys", "stats")
	if !regexp.MustCompile(`(?m)^createPayment +2 +1 +2 +0 +\S+ \(\S+ ago\) +1 +\S+ \(2[45]m\S* ago\)$`).MatchString(out) {
		t.Errorf("stats: no uncertain count and oldest for createPayment:\n%s", out)
	}

	code, out, stderr = e.run("keys", "list", "--state", "uncertain")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 2 || !strings.Contains(lines[1], `"pay-9"`) || !strings.Contains(lines[1], "uncertain") {
		t.Errorf("list --state uncertain: exit %d, stderr %q:\n%s", code, stderr, out)
	}
}

// resolvedEvent is the resolved row of key's history.
// resolvedEvent is the resolved history row of key: its status, actor, and the resolution and
// the evidence (detail) as "resolution: detail".
func (e *keysEnv) resolvedEvent(key string) (status int, actor, detail string) {
	e.t.Helper()
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT coalesce(status, 0), actor, resolution || ': ' || detail FROM `+e.events()+`
		WHERE key = $1 AND kind = 'resolved'`, key).Scan(&status, &actor, &detail); err != nil {
		e.t.Fatalf("the resolved history row of %s: %v", key, err)
	}
	return status, actor, detail
}

func TestKeysResolveCompleted(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.makeUncertain("acme", "pay-9", "createPayment")
	body := filepath.Join(t.TempDir(), "payment.json")
	writeFile(t, body, `{"id":"pay_9","status":"captured"}`)
	code, out, stderr := e.run("keys", "resolve", "--tenant", "acme", "--key", "pay-9", "--as", "completed",
		"--status", "201", "--body-file", body, "--content-type", "application/json",
		"--evidence", "acquirer charge ch_91 captured 15.00 RUB", "--actor", "alice", "--ttl", "2d")
	if code != ExitOK || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{`resolved key "pay-9" (tenant "acme", operation createPayment, key hash ` + idem.KeyHash("createPayment", "pay-9") + `) as completed`,
		"every retry now replays status 201, a 34-byte body", `by "alice", evidence "acquirer charge ch_91 captured 15.00 RUB"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var state, headers string
	var status int
	var b []byte
	var ttl time.Duration
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT state, status, headers::text, body,
		extract(epoch FROM expires_at - completed_at)::bigint * 1000000000 FROM `+e.store.Table()+` WHERE key = 'pay-9'`).Scan(&state, &status, &headers, &b, &ttl); err != nil {
		t.Fatal(err)
	}
	if state != "complete" || status != 201 || string(b) != `{"id":"pay_9","status":"captured"}` ||
		!strings.Contains(headers, "application/json") || ttl != 48*time.Hour {
		t.Errorf("key row after resolve: %s %d %s %q ttl %v", state, status, headers, b, ttl)
	}
	st, actor, detail := e.resolvedEvent("pay-9")
	if st != 201 || actor != "alice" || detail != "completed: acquirer charge ch_91 captured 15.00 RUB" {
		t.Errorf("resolved history row: status %d, actor %q, detail %q", st, actor, detail)
	}

	// Settled: a second resolve finds nothing uncertain.
	code, out, stderr = e.run("keys", "resolve", "--tenant", "acme", "--key", "pay-9", "--as", "failed", "--evidence", "again")
	if code != ExitFindings || out != "" || !strings.Contains(stderr, "is complete, not uncertain") {
		t.Errorf("resolving a settled key: exit %d, stdout %q, stderr %q; want exit 1", code, out, stderr)
	}
}

func TestKeysResolveFailedByHashAndActorDefault(t *testing.T) {
	t.Setenv("USER", "bob")
	e := newKeysEnv(t)
	e.makeUncertain("acme", "pay-9", "createPayment")
	code, out, stderr := e.run("keys", "resolve", "--key-hash", idem.KeyHash("createPayment", "pay-9"), "--as", "failed",
		"--evidence", "acquirer: no such charge", "--json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || res["resolved_as"] != "failed" || res["actor"] != "bob" || res["key"] != "pay-9" {
		t.Errorf("--json: %v %v\n%s", err, res, out)
	}
	var n int
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.store.Table()+` WHERE key = 'pay-9'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the key row after resolving as failed: %d rows, %v; want it deleted", n, err)
	}
	if st, actor, detail := e.resolvedEvent("pay-9"); st != 0 || actor != "bob" || detail != "failed: acquirer: no such charge" {
		t.Errorf("resolved history row: status %d, actor %q, detail %q", st, actor, detail)
	}
	code, _, stderr = e.run("keys", "resolve", "--tenant", "acme", "--key", "pay-9", "--as", "failed", "--evidence", "x")
	if code != ExitFindings || !strings.HasPrefix(stderr, "idemgen: keys resolve: no such key: ") {
		t.Errorf("resolving a key that is gone: exit %d, stderr %q; want exit 1", code, stderr)
	}
}

func TestKeysResolveRefusesAmbiguousAndSettledKeys(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.makeUncertain("acme", "dup", "createPayment")
	e.makeUncertain("globex", "dup", "createPayment")
	e.makeUncertain("acme", "dup", "refundPayment")
	code, out, stderr := e.run("keys", "resolve", "--key", "dup", "--as", "failed", "--evidence", "x", "--actor", "a")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, `key "dup" names 3 keys; narrow it with --tenant and --operation`) ||
		!strings.Contains(stderr, `tenant "globex", operation createPayment, scope "createPayment": uncertain`) ||
		!strings.Contains(stderr, `tenant "acme", operation refundPayment`) {
		t.Errorf("ambiguous key: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var n int
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.store.Table()+` WHERE key = 'dup' AND state = 'uncertain'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("after the refusal: %d uncertain, %v; want all 3 untouched", n, err)
	}
	// Exactly two: still ambiguous, and neither is settled.
	code, out, stderr = e.run("keys", "resolve", "--key", "dup", "--operation", "createPayment", "--as", "failed", "--evidence", "x", "--actor", "a")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, `names 2 keys; narrow it with --tenant and --operation`) {
		t.Errorf("two matching keys: exit %d, stdout %q, stderr %q; want exit 2, refused as ambiguous", code, out, stderr)
	}
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.store.Table()+` WHERE key = 'dup' AND state = 'uncertain'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("after refusing two matching keys: %d uncertain, %v; want all 3 untouched", n, err)
	}
	code, _, stderr = e.run("keys", "resolve", "--key", "dup", "--tenant", "acme", "--operation", "refundPayment", "--as", "failed", "--evidence", "x", "--actor", "a")
	if code != ExitOK {
		t.Errorf("narrowed: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = e.run("keys", "resolve", "--key", "pay-1", "--tenant", "acme", "--as", "failed", "--evidence", "x", "--actor", "a")
	if code != ExitFindings || !strings.Contains(stderr, `key "pay-1" (tenant "acme", operation createPayment) is complete, not uncertain`) {
		t.Errorf("a complete key: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = e.run("keys", "resolve", "--key", "pay-2", "--tenant", "acme", "--as", "failed", "--evidence", "x", "--actor", "a")
	if code != ExitFindings || !strings.Contains(stderr, "is in_flight, not uncertain") {
		t.Errorf("an in-flight key: exit %d, stderr %q", code, stderr)
	}
}

func TestKeysResolveUsage(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--as", "failed", "--evidence", "x"}, "give --key or --key-hash"},
		{[]string{"--key", "k", "--key-hash", "0123456789abcdef", "--as", "failed", "--evidence", "x"}, "give --key or --key-hash"},
		{[]string{"--key-hash", "nothex", "--as", "failed", "--evidence", "x"}, "--key-hash: "},
		{[]string{"--key", "k", "--evidence", "x"}, "--as is required"},
		{[]string{"--key", "k", "--as", "done", "--evidence", "x"}, `--as "done": want completed or failed`},
		{[]string{"--key", "k", "--as", "failed"}, "--evidence is required"},
		{[]string{"--key", "k", "--as", "failed", "--evidence", "  "}, "--evidence is required"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x"}, "--as completed needs the outcome"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "201"}, "give one of --body-file"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "99", "--no-body"}, "--status 99 is not an HTTP status"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "200", "--no-body", "--reference", "r"}, "give one of --body-file"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "200", "--reference", "r", "--content-type", "a/b"}, "--content-type goes with --body-file"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "200", "--body-file", "/nonexistent/idemgen-body"}, "--body-file: "},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "204", "--no-body", "--ttl", "soon"}, `--ttl "soon"`},
		{[]string{"--key", "k", "--as", "failed", "--evidence", "x", "--status", "200"}, "--status is for --as completed"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "500", "--body-file", "/dev/null"}, "--status 500: every retry would be given it as final"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "503", "--no-body"}, "--status 503: every retry"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "101", "--no-body"}, "--status 101: every retry"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "201", "--no-body"}, "--no-body with --status 201: a 201 answers with a body"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "201", "--body-file", "/dev/null", "--content-type", "application/json\r\nSet-Cookie: a=b"},
			"holds a control character"},
		{[]string{"--key", "k", "--as", "completed", "--evidence", "x", "--status", "201", "--body-file", "/dev/null", "--content-type", "json!!"},
			"not a media type"},
	} {
		code, out, stderr := runMain("", append([]string{"keys", "resolve"}, c.args...)...)
		if code != ExitUsage || out != "" || !strings.HasPrefix(stderr, "idemgen: keys resolve: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 before connecting, saying %q", c.args, code, out, stderr, c.want)
		}
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestKeysShowWithoutAHistoryTable(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.exec(`DROP TABLE ` + e.events())
	code, out, stderr := e.run("keys", "show", "--tenant", "acme", "--key", "pay-1")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, "there is no history table beside") || !strings.Contains(stderr, "run idemgen migrate") {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 saying to migrate", code, out, stderr)
	}
}

// TestKeysResolveConcurrently: two operators settle the same key at once, one as completed and
// one as failed; exactly one succeeds, the other is told the key is settled or gone.
func TestKeysResolveConcurrently(t *testing.T) {
	t.Parallel()
	e := newKeysEnv(t)
	e.makeUncertain("acme", "pay-9", "createPayment")
	args := [][]string{
		{"keys", "resolve", "--tenant", "acme", "--key", "pay-9", "--as", "completed", "--status", "204", "--no-body", "--evidence", "a", "--actor", "alice"},
		{"keys", "resolve", "--tenant", "acme", "--key", "pay-9", "--as", "failed", "--evidence", "b", "--actor", "bob"},
	}
	codes := make([]int, len(args))
	stderrs := make([]string, len(args))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range args {
		wg.Go(func() {
			<-start
			codes[i], _, stderrs[i] = e.run(a...)
		})
	}
	close(start)
	wg.Wait()
	if codes[0]+codes[1] != ExitFindings || (codes[0] != ExitOK && codes[1] != ExitOK) {
		t.Fatalf("exits %v (stderr %q); want one 0 and one 1", codes, stderrs)
	}
	loser := stderrs[0] + stderrs[1]
	if !strings.Contains(loser, "not uncertain") && !strings.Contains(loser, "no such key") && !strings.Contains(loser, "is gone") {
		t.Errorf("the loser's message: %q", loser)
	}
	var n int
	if err := e.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+e.events()+` WHERE key = 'pay-9' AND kind = 'resolved'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("resolved history rows: %d, %v; want exactly one", n, err)
	}
}
