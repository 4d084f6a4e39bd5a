package payments

// A transfer (createTransfer, declared uncertainOnLoss) whose server process is killed after the
// bank charged and before the completion committed: the retry is told the outcome is uncertain
// instead of charging again; reconciliation against the bank's report finds the charge and
// settles the key; the next retry replays the settled answer; the bank charged once; and the
// key's history tells the story.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

func TestTransferLostToACrashIsSettledByReconciliation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := idemtest.TestSchema(t, nil)
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	if err := migratePayouts(ctx, schema.Pool, schema.Name, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	// The bank kills the server once it has charged, before answering: the handler never learns
	// the outcome, and its transaction dies with the process.
	var first *childProcess
	charged := make(chan struct{}, 1)
	b := &bank{db: schema.Pool, afterCharge: func(ctx context.Context, key string, calls int) {
		if calls == 1 && first != nil {
			first.kill()
			charged <- struct{}{}
		}
	}}
	bankSrv := httptest.NewServer(b)
	t.Cleanup(bankSrv.Close)
	bankEnv := restartChildBank + "=" + bankSrv.URL
	first = startChild(t, "first server", schema, addr, false, bankEnv)

	const key = "transfer-lost-1"
	body := `{"account":"DE02-0001","amount_minor":2500,"currency":"EUR"}`
	send := func() (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/transfers", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant-ID", "acme")
		req.Header.Set("Idempotency-Key", key)
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	if resp, b, err := send(); err == nil {
		t.Fatalf("the first transfer was answered %d %s; want the server killed before it answered", resp.StatusCode, b)
	}
	select {
	case <-charged:
	case <-time.After(30 * time.Second):
		t.Fatal("the bank did not charge the first transfer within 30s")
	}

	startChild(t, "restarted server", schema, addr, false, bankEnv)
	store, err := idem.NewStore(schema.Pool, schema.Config())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := store.LookupKey(ctx, &idem.LookupKeyParams{Key: key})
	if err != nil || len(keys) != 1 || keys[0].State != idem.KeyInFlight {
		t.Fatalf("the dead attempt's key: %+v, %v; want one key in flight", keys, err)
	}
	// A retry within the dead attempt's lease is told it is in progress; past it (its end
	// brought forward, rather than waiting the 60s), the key turns uncertain.
	if resp, b, err := send(); err != nil || resp.StatusCode != http.StatusConflict || problemCode(b) != "in-progress" {
		t.Fatalf("retry within the lease: %v %s %v; want 409 in-progress", status(resp), b, err)
	}
	if _, err := schema.Pool.Exec(ctx, `UPDATE `+store.Table()+` SET lease_expires_at = now() WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, b, err := send()
		if err != nil || resp.StatusCode != http.StatusConflict || problemCode(b) != "operation-uncertain" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("retry %d after the lease: %v %s %v; want 409 operation-uncertain without Retry-After", i+1, status(resp), b, err)
		}
	}
	if n := count(t, schema, `SELECT sum(calls) FROM bank_charges`); n != 1 {
		t.Fatalf("the bank saw %d calls; want 1: the uncertain key must not call it again", n)
	}

	// Reconciliation: first as a report, then settling.
	today := time.Now().UTC()
	rep, err := ReconcileTransfers(ctx, schema.Pool, schema.Config(), bankSrv.URL, today, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Discrepancies) != 1 || rep.Discrepancies[0].Kind != idemreconcile.UncertainCharged {
		t.Fatalf("reconciliation found %+v; want one uncertain_charged", rep.Discrepancies)
	}
	rep, err = ReconcileTransfers(ctx, schema.Pool, schema.Config(), bankSrv.URL, today, true)
	if err != nil || !rep.Clean() || len(rep.Resolved) != 1 || rep.Resolved[0].As != "completed" {
		t.Fatalf("reconciliation with resolve: %+v, %v; want the key resolved as completed, nothing left", rep, err)
	}

	resp, b2, err := send()
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after reconciliation: %v %s %v; want the settled 201 replayed", status(resp), b2, err)
	}
	var tr struct {
		TransferID   string `json:"transfer_id"`
		BankChargeID string `json:"bank_charge_id"`
		AmountMinor  int64  `json:"amount_minor"`
	}
	if err := json.Unmarshal(b2, &tr); err != nil || tr.TransferID != derivedID("tr_", "acme", key) || tr.AmountMinor != 2500 {
		t.Fatalf("replayed transfer %s (%v); want transfer %s of 2500", b2, err, derivedID("tr_", "acme", key))
	}
	if n := count(t, schema, `SELECT count(*) FROM bank_charges WHERE charge_id::text = '`+tr.BankChargeID+`' AND calls = 1`); n != 1 {
		t.Fatalf("the replay's bank charge %q is not the bank's one charge, called once", tr.BankChargeID)
	}
	if n := count(t, schema, `SELECT count(*) FROM transfers WHERE settled_by = 'reconciliation'`); n != 1 {
		t.Fatalf("%d transfers settled by reconciliation; want 1", n)
	}

	hist, err := store.History(ctx, keys[0].Tenant, keys[0].Scope, keys[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, ev := range hist {
		kinds = append(kinds, string(ev.Kind))
	}
	want := []string{"acquired", "provider_call", "uncertain", "resolved"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("history %v; want %v", kinds, want)
	}
	t.Logf("history of the lost transfer:")
	for _, ev := range hist {
		t.Logf("  %s %-13s attempt %d %s %s %s", ev.At.UTC().Format(time.RFC3339Nano), ev.Kind, ev.Attempt, ev.Detail, ev.Actor, ev.ProviderKey)
	}
}

func problemCode(body []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(body, &p)
	return p.Code
}

func status(resp *http.Response) any {
	if resp == nil {
		return "no answer"
	}
	return resp.StatusCode
}

func count(t *testing.T, schema *idemtest.Schema, sql string) int64 {
	t.Helper()
	var n *int64
	if err := schema.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if n == nil {
		return 0
	}
	return *n
}
