package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
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
	if got := strings.Join(rows["(all)"][:4], " "); got != "2 1 3 0" || !strings.HasSuffix(strings.Join(rows["(all)"], " "), " ago)") {
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
