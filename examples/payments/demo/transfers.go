package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The last steps: transfers through the bank while the request waits, reconciliation against the
// bank's daily report, and a transfer whose answer from the bank is lost.

// tools are what the transfer steps run besides HTTP: the idemgen command and the example's own
// reconcile (payments reconcile), with the bank's address.
type tools struct {
	idemgen, payments, bankURL string
}

func (d *demo) transfers(ctx context.Context, step int) error {
	if d.tools.idemgen == "" || d.tools.payments == "" || d.tools.bankURL == "" {
		d.say("(transfers and reconciliation skipped: run with -idemgen, -payments and -bank-url, as make demo does)")
		return nil
	}
	d.title(step, "A transfer through the bank, and the daily reconciliation against the bank's report")
	ok := &call{method: "POST", path: "/v1/transfers", key: "transfer-" + randomHex(6),
		body: `{"account": "DE89370400440532013000", "amount_minor": 12500, "currency": "EUR"}`}
	if err := d.send(ctx, ok); err != nil {
		return err
	}
	d.show("transfer", ok)
	d.expect(ok.status == http.StatusCreated, "The bank charged it, with a key derived from ours, recorded in the key's history first.",
		fmt.Sprintf("the transfer got %d; want 201", ok.status))
	var charged struct {
		ChargeID string `json:"bank_charge_id"`
	}
	if json.Unmarshal(ok.resp, &charged) == nil {
		d.transferCharge = charged.ChargeID // settled by the bank's webhook (webhooks.go)
	}
	report, err := d.bankReport(ctx)
	if err != nil {
		return err
	}
	code, out := d.run(ctx, d.tools.idemgen, d.reconcileArgs(report)...)
	d.say("$ idemgen reconcile --records bank-report.csv --provider bank:transfers …")
	d.quote(out)
	d.expect(code == 0, "Every transfer we completed is in the bank's report, and the report has nothing else: clean (exit 0).",
		fmt.Sprintf("reconciliation exited %d; want 0 (clean)", code))

	d.title(step+1, "The bank's answer is lost: the outcome is uncertain, and the report settles it")
	lost := &call{method: "POST", path: "/v1/transfers", key: "transfer-" + randomHex(6),
		body: `{"account": "lost-answer-DE0001", "amount_minor": 4200, "currency": "EUR"}`}
	if err := d.send(ctx, lost); err != nil {
		return err
	}
	d.show("transfer", lost)
	d.expect(lost.status == http.StatusConflict && lost.problem() == "operation-uncertain",
		"The fake bank charged this account and never answered; the handler gave up after 5s.\n"+
			"   It had called the bank, so the server does not say \"nothing changed\": the outcome is uncertain.",
		fmt.Sprintf("the transfer whose answer was lost got %d %s; want 409 operation-uncertain", lost.status, lost.problem()))
	retry := &call{method: "POST", path: lost.path, key: lost.key, body: lost.body}
	if err := d.send(ctx, retry); err != nil {
		return err
	}
	d.show("retry", retry)
	d.expect(retry.status == http.StatusConflict && retry.problem() == "operation-uncertain",
		"createTransfer is declared uncertainOnLoss: after the bank call, a lost attempt is not run again.\n"+
			"   The retry is told the outcome is uncertain; the generated client does not retry that.",
		fmt.Sprintf("the retry got %d %s; want 409 operation-uncertain", retry.status, retry.problem()))
	if report, err = d.bankReport(ctx); err != nil {
		return err
	}
	code, out = d.run(ctx, d.tools.idemgen, d.reconcileArgs(report)...)
	d.say("$ idemgen reconcile …   (the bank's report of today, again)")
	d.quote(out)
	d.expect(code == 1 && strings.Contains(out, "uncertain_charged"),
		"The report has a charge for the uncertain key: uncertain_charged (exit 1, so a cron job pages).",
		fmt.Sprintf("reconciliation exited %d without uncertain_charged; want exit 1 reporting it", code))
	code, out = d.run(ctx, d.tools.payments, "reconcile", "-database-url", d.dbURL, "-bank-url", d.tools.bankURL, "-resolve")
	d.say("$ payments reconcile -resolve   (the example's own: it writes the transfer the charge proves)")
	d.quote(out)
	d.expect(code == 0 && strings.Contains(out, "resolved as completed"),
		"Settled as completed from the bank's record, recorded in the key's history.",
		fmt.Sprintf("payments reconcile -resolve exited %d; want 0 with the key resolved as completed", code))
	again := &call{method: "POST", path: lost.path, key: lost.key, body: lost.body}
	if err := d.send(ctx, again); err != nil {
		return err
	}
	d.show("retry", again)
	d.expect(again.status == http.StatusCreated && again.replayed(),
		"The retry replays the settled answer. The bank was charged once.",
		fmt.Sprintf("the retry after settling got %d (replayed %v); want the 201 replayed", again.status, again.replayed()))
	code, out = d.run(ctx, d.tools.idemgen, "keys", "show", "--database-url", d.dbURL, "--tenant", d.tenant, "--key", lost.key)
	d.say("$ idemgen keys show --tenant " + d.tenant + " --key " + lost.key)
	d.quote(out)
	d.expect(code == 0 && strings.Contains(out, "uncertain") && strings.Contains(out, "resolved"),
		"The key's history: claimed, the bank call, uncertain, resolved by reconciliation.",
		fmt.Sprintf("keys show exited %d without the history", code))
	return nil
}

// bankReport fetches today's report of transfers from the bank into a file, and returns its path.
func (d *demo) bankReport(ctx context.Context) (string, error) {
	u := strings.TrimRight(d.tools.bankURL, "/") + "/reports/charges?purpose=transfer&day=" + time.Now().UTC().Format(time.DateOnly)
	c := &call{method: "GET"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if err := d.do(req, c); err != nil {
		return "", err
	}
	if c.status != http.StatusOK {
		return "", fmt.Errorf("the bank's report: %d %s", c.status, c.resp)
	}
	path := d.workDir + "/bank-report.csv"
	return path, writeFile(path, c.resp)
}

func (d *demo) reconcileArgs(report string) []string {
	today := time.Now().UTC().Format(time.DateOnly)
	return []string{"reconcile", "--database-url", d.dbURL, "--records", report, "--provider", "bank:transfers",
		"--column-key", "idempotency_key", "--column-reference", "charge_id", "--column-amount", "amount_minor",
		"--column-at", "created_at", "--from", today}
}

// run runs a command and returns its exit code and combined output.
func (d *demo) run(ctx context.Context, name string, args ...string) (int, string) {
	var b bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, b.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), b.String()
	}
	return -1, b.String() + err.Error()
}

// quote prints a command's output indented.
func (d *demo) quote(out string) {
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Fprintln(d.out, "     | "+l)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o600) }
