package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

// reconcileEnv is a key history with three provider calls of 2026-12-04: two completed and
// charged (at 10:00 and 23:00), one uncertain (at 11:00).
func reconcileEnv(t *testing.T) (base []string, s *idemtest.Schema) {
	t.Helper()
	s = idemtest.TestSchema(t, nil)
	events := pgx.Identifier{s.Name, idem.HistoryTableName(s.Table)}.Sanitize()
	table := pgx.Identifier{s.Name, s.Table}.Sanitize()
	for _, q := range []string{
		`INSERT INTO ` + events + ` (tenant, scope, key, at, kind, operation, provider, provider_key, amount, currency) VALUES
			('acme', 'createPayment', 'k-ok', '2026-12-04T10:00:00Z', 'provider_call', 'createPayment', 'acquirer', 'p-ok', 1250, 'EUR'),
			('acme', 'createPayment', 'k-unc', '2026-12-04T11:00:00Z', 'provider_call', 'createPayment', 'acquirer', 'p-unc', 900, 'EUR'),
			('acme', 'createPayment', 'k-late', '2026-12-04T23:00:00Z', 'provider_call', 'createPayment', 'acquirer', 'p-late', 100, 'EUR')`,
		`INSERT INTO ` + events + ` (tenant, scope, key, at, kind, operation, status) VALUES
			('acme', 'createPayment', 'k-ok', '2026-12-04T10:00:01Z', 'completed', 'createPayment', 201),
			('acme', 'createPayment', 'k-unc', '2026-12-04T11:01:00Z', 'uncertain', 'createPayment', NULL),
			('acme', 'createPayment', 'k-late', '2026-12-04T23:00:01Z', 'completed', 'createPayment', 201)`,
		`INSERT INTO ` + table + ` (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at, provider_at)
			VALUES ('acme', 'createPayment', 'k-unc', 'createPayment', 'fp', 'uncertain', gen_random_uuid(), now(), 'infinity', '2026-12-04T11:00:00Z')`,
	} {
		if _, err := s.Pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"reconcile", "--database-url", s.URL, "--schema", s.Name, "--table", s.Table,
		"--provider", "acquirer", "--from", "2026-12-04"}, s
}

func writeTempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	base, _ := reconcileEnv(t)
	csvFile := writeTempFile(t, "settlement.csv", "charge_id,idem,value,ccy,time\nch_1,p-ok,12.50,EUR,2026-12-04T10:00:05Z\n"+
		"ch_3,p-late,1.00,EUR,2026-12-04T23:00:05Z\n")
	mapping := writeTempFile(t, "mapping.yaml", "key: idem\nreference: charge_id\namount: value\ncurrency: ccy\nat: time\namount_scale: 2\n")
	metrics := filepath.Join(t.TempDir(), "reconcile.prom")

	// The uncertain key the provider has no record of: exit 1, listed under acme's day.
	code, out, stderr := runMain("", append(base, "--records", csvFile, "--mapping", mapping, "--metrics-file", metrics)...)
	if code != ExitFindings || !strings.Contains(out, `tenant "acme", 2026-12-04: 1 discrepancies`) ||
		!strings.Contains(out, "uncertain_not_charged") || !strings.Contains(out, idem.KeyHash("createPayment", "k-unc")) ||
		strings.Contains(out, "k-unc") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr: %s\nwant exit 1, the uncertain key by its hash only", code, out, stderr)
	}
	b, err := os.ReadFile(metrics)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`idemgen_idempotency_reconcile_discrepancies{kind="uncertain_not_charged",provider="acquirer"} 1`,
		`idemgen_idempotency_reconcile_discrepancies{kind="missing_charge",provider="acquirer"} 0`,
		`idemgen_idempotency_reconcile_records{provider="acquirer"} 2`,
		`# TYPE idemgen_idempotency_reconcile_last_run_timestamp_seconds gauge`,
	} {
		if !strings.Contains(string(b), line+"\n") {
			t.Errorf("--metrics-file lacks %q:\n%s", line, b)
		}
	}

	// --resolve settles it as failed: clean, exit 0, and the JSON says what was resolved.
	code, out, stderr = runMain("", append(base, "--records", csvFile, "--mapping", mapping, "--resolve", "--format", "json")...)
	var rep struct {
		Discrepancies []any `json:"discrepancies"`
		Resolved      []struct {
			As   string `json:"as"`
			Ours struct {
				KeyHash string `json:"key_hash"`
			} `json:"ours"`
		} `json:"resolved"`
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Discrepancies) != 0 || len(rep.Resolved) != 1 ||
		rep.Resolved[0].As != "failed" || rep.Resolved[0].Ours.KeyHash != idem.KeyHash("createPayment", "k-unc") {
		t.Fatalf("--resolve: exit %d, stdout:\n%s\nstderr: %s", code, out, stderr)
	}
	code, out, _ = runMain("", append(base, "--records", csvFile, "--mapping", mapping)...)
	if code != ExitOK || !strings.Contains(out, "clean: no discrepancy") {
		t.Errorf("after resolving: exit %d\n%s", code, out)
	}
}

func TestReconcileCommandListsTheSettleCommand(t *testing.T) {
	t.Parallel()
	base, _ := reconcileEnv(t)
	jsonl := writeTempFile(t, "charges.jsonl", `{"key":"p-ok","reference":"ch_1","amount":1250,"currency":"EUR","at":"2026-12-04T10:00:05Z"}`+"\n"+
		`{"key":"p-unc","reference":"ch_2","amount":900,"currency":"EUR","at":"2026-12-04T11:00:05Z"}`+"\n"+
		`{"key":"p-late","reference":"ch_3","amount":100,"currency":"EUR","at":"2026-12-04T23:00:05Z"}`+"\n")
	code, out, stderr := runMain("", append(base, "--records", jsonl, "--resolve")...)
	if code != ExitFindings || !strings.Contains(out, "uncertain_charged") ||
		!strings.Contains(out, "idemgen keys resolve --tenant acme --key-hash "+idem.KeyHash("createPayment", "k-unc")+" --as completed") ||
		!strings.Contains(out, "'charged at acquirer: ch_2 900 EUR'") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant the charged uncertain key with the command that settles it", code, out, stderr)
	}
}

func TestReconcileCommandRefusesBadInput(t *testing.T) {
	t.Parallel()
	bad := writeTempFile(t, "bad.csv", "key,reference,amount,currency,at\np-1,ch_1,12.50,EUR,2026-12-04T10:00:00Z\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--records", bad}, `bad.csv:2: column "amount": "12.50" is not an amount in minor units`},
		{[]string{"--records", writeTempFile(t, "r.txt", "")}, "cannot tell the format"},
		{[]string{}, "give the provider's records with --records"},
		{[]string{"--records", bad, "--from", "04/12/2026"}, `--from "04/12/2026": want a day`},
		{[]string{"--records", bad, "--format", "xml"}, "--format"},
		{[]string{"--records", filepath.Join(t.TempDir(), "none.csv")}, "no such file"},
	} {
		code, out, stderr := runMain("", append([]string{"reconcile", "--database-url", "postgres://nobody@127.0.0.1:1/x"}, c.args...)...)
		if code != ExitUsage || out != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, stderr, c.want)
		}
	}
}

// The bank charged the uncertain key and its answer was lost. A report holding only its header
// (a failed export) with --resolve settles nothing: exit 1, the calls reported not_covered, the
// key still uncertain. The real report shows the charge and the command that settles the key
// as completed; run, it does.
func TestReconcileCommandHeaderOnlyReportSettlesNothing(t *testing.T) {
	t.Parallel()
	base, s := reconcileEnv(t)
	state := func() string {
		var st string
		if err := s.Pool.QueryRow(context.Background(), `SELECT coalesce((SELECT state FROM `+pgx.Identifier{s.Name, s.Table}.Sanitize()+
			` WHERE key = 'k-unc'), 'gone')`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	empty := writeTempFile(t, "empty.csv", "key,reference,amount,currency,at\n")
	code, out, stderr := runMain("", append(base, "--records", empty, "--resolve")...)
	if code != ExitFindings || !strings.Contains(out, "not_covered") || !strings.Contains(out, `no record of "acquirer" was read`) ||
		strings.Contains(out, "resolved") || strings.Contains(out, "clean") || state() != "uncertain" {
		t.Fatalf("header-only report: exit %d, key %s, stdout:\n%s\nstderr: %s\nwant exit 1, nothing resolved, the key still uncertain", code, state(), out, stderr)
	}
	real := writeTempFile(t, "real.csv", "key,reference,amount,currency,at\np-ok,ch_1,1250,EUR,2026-12-04T10:00:05Z\n"+
		"p-unc,ch_2,900,EUR,2026-12-04T11:00:05Z\np-late,ch_3,100,EUR,2026-12-04T23:00:05Z\n")
	code, out, stderr = runMain("", append(base, "--records", real, "--resolve")...)
	if code != ExitFindings || !strings.Contains(out, "uncertain_charged") || state() != "uncertain" {
		t.Fatalf("real report: exit %d, key %s, stdout:\n%s\nstderr: %s\nwant uncertain_charged, to settle by the command listed", code, state(), out, stderr)
	}
	body := writeTempFile(t, "answer.json", `{"id":"ch_2"}`)
	code, out, stderr = runMain("", "keys", "resolve", "--database-url", s.URL, "--schema", s.Name, "--table", s.Table,
		"--tenant", "acme", "--key-hash", idem.KeyHash("createPayment", "k-unc"), "--as", "completed", "--status", "201",
		"--body-file", body, "--content-type", "application/json", "--evidence", "charged at acquirer: ch_2 900 EUR")
	if code != ExitOK || state() != "complete" {
		t.Fatalf("keys resolve: exit %d, key %s\n%s\n%s", code, state(), out, stderr)
	}
	code, out, _ = runMain("", append(base, "--records", real)...)
	if code != ExitOK || !strings.Contains(out, "clean: no discrepancy") {
		t.Errorf("after settling: exit %d\n%s", code, out)
	}
}

// Values from the provider's file reach the terminal quoted: a terminal escape in a header or
// a reference is printed as an escape sequence, never sent raw.
func TestReconcileCommandEscapesWhatItPrints(t *testing.T) {
	t.Parallel()
	base, _ := reconcileEnv(t)
	esc := "\x1b]0;owned\x07\x1b[2J"
	badHeader := writeTempFile(t, "h.csv", "key,amount,"+esc+",at\np,1,EUR,2026-12-04T10:00:00Z\n")
	code, out, stderr := runMain("", append(base, "--records", badHeader)...)
	if code != ExitUsage || strings.ContainsAny(out+stderr, "\x1b\x07") {
		t.Errorf("header with an escape: exit %d, stdout %q, stderr %q; want exit 2, no control character", code, out, stderr)
	}
	refs := writeTempFile(t, "r.csv", "key,reference,amount,currency,at\np-x,"+esc+",1,EUR,2026-12-04T10:00:05Z\n")
	code, out, stderr = runMain("", append(base, "--records", refs)...)
	if code != ExitFindings || strings.ContainsAny(out+stderr, "\x1b\x07") || !strings.Contains(out, `\x1b]0;owned`) {
		t.Errorf("reference with an escape: exit %d, stdout %q, stderr %q; want it printed escaped", code, out, stderr)
	}
}
