package payments

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/examples/payments/api"
	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemreconcile"
)

// Reconciliation of transfers against the bank's daily report, with the example's own answer for
// a transfer whose answer was lost and that the report proves charged: `payments reconcile`.
//
// idemgen reconcile (the CLI) finds the same discrepancies from a report file, and settles the
// uncertain keys the bank has no charge for; settling one the bank did charge needs what only the
// application can write, the transfer row the charge proves and the 201 retries will replay.
// That is settleTransfer, passed to idemreconcile.Reconcile as its Settle hook.

// bankReportColumns' meaning for idemreconcile.
var bankReportMapping = idemreconcile.Columns{Key: "idempotency_key", Reference: "charge_id", Amount: "amount_minor",
	Currency: "currency", At: "created_at", TimeLayout: "rfc3339"}

// fetchBankReport reads the bank's report of transfers for day.
func fetchBankReport(ctx context.Context, bankURL string, day time.Time) ([]byte, error) {
	u := strings.TrimRight(bankURL, "/") + "/reports/charges?purpose=" + purposeTransfer + "&day=" + day.Format(time.DateOnly)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("bank report: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("bank report: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bank report: %s", resp.Status)
	}
	return body, nil
}

// reportAccounts maps each derived key of a bank report to the account it charged: the one fact
// of a transfer row its history does not hold.
func reportAccounts(report []byte) (map[string]string, error) {
	rows, err := csv.NewReader(bytes.NewReader(report)).ReadAll()
	if err != nil || len(rows) == 0 {
		return nil, fmt.Errorf("bank report: not CSV with a header: %v", err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	k, okK := col["idempotency_key"]
	a, okA := col["account"]
	if !okK || !okA {
		return nil, errors.New("bank report: no idempotency_key or account column")
	}
	m := map[string]string{}
	for _, r := range rows[1:] {
		m[r[k]] = r[a]
	}
	return m, nil
}

// ReconcileTransfers reconciles the transfers of day (UTC) against the bank's report of that
// day, fetched from bankURL; with resolve, it settles the uncertain transfers the report decides:
// charged ones as completed (the transfer row written from the report, the 201 stored for
// retries), the others as failed (the next retry transfers anew).
func ReconcileTransfers(ctx context.Context, pool *pgxpool.Pool, cfg *idem.Config, bankURL string, day time.Time, resolve bool) (*idemreconcile.Report, error) {
	report, err := fetchBankReport(ctx, bankURL, day)
	if err != nil {
		return nil, err
	}
	recs, err := idemreconcile.ReadCSV(bytes.NewReader(report), "bank report "+day.Format(time.DateOnly), bankReportMapping)
	if err != nil {
		return nil, err
	}
	accounts, err := reportAccounts(report)
	if err != nil {
		return nil, err
	}
	from := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	return idemreconcile.Reconcile(ctx, pool, cfg, recs, &idemreconcile.Opts{
		From: from, To: from.AddDate(0, 0, 1), Providers: []string{transferProvider},
		Resolve: resolve, Actor: "payments reconcile",
		Settle: func(ctx context.Context, tx pgx.Tx, key idemreconcile.UncertainKey, rec idemreconcile.Record) (*idem.Outcome, error) {
			return settleTransfer(ctx, tx, key, rec, accounts[rec.Key])
		},
	})
}

// settleTransfer writes the transfer the bank's record proves, and returns the answer its
// handler would have given: the 201 with the transfer, rendered as the generated server renders
// it.
func settleTransfer(ctx context.Context, tx pgx.Tx, key idemreconcile.UncertainKey, rec idemreconcile.Record, account string) (*idem.Outcome, error) {
	if account == "" {
		return nil, fmt.Errorf("the bank's record of %s names no account", rec.Key)
	}
	t, err := insertTransfer(ctx, tx, key.Tenant, key.Key, account, rec.Amount, rec.Currency, rec.Reference, "reconciliation")
	if err != nil {
		return nil, err
	}
	w := httptest.NewRecorder()
	if err := api.CreateTransfer201JSONResponse(t).VisitCreateTransferResponse(w); err != nil {
		return nil, err
	}
	return &idem.Outcome{Status: w.Code, Header: http.Header{"Content-Type": w.Header().Values("Content-Type")}, Body: w.Body.Bytes()}, nil
}

// runReconcile is `payments reconcile`: flags, then ReconcileTransfers, printed. Exit status 1
// when the report shows a discrepancy left unresolved.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("payments reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", "", "PostgreSQL URL (default: $DATABASE_URL)")
	bankURL := fs.String("bank-url", "", "the bank whose daily report is read (required)")
	dayFlag := fs.String("day", "", "the day (UTC) to reconcile, YYYY-MM-DD (default: today)")
	resolve := fs.Bool("resolve", false, "settle the uncertain transfers the report decides")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *dbURL == "" {
		*dbURL = os.Getenv("DATABASE_URL")
	}
	if *bankURL == "" {
		return usageError{errors.New("reconcile: -bank-url is required")}
	}
	day := time.Now().UTC()
	if *dayFlag != "" {
		d, err := time.Parse(time.DateOnly, *dayFlag)
		if err != nil {
			return usageError{fmt.Errorf("reconcile: -day %q: want YYYY-MM-DD", *dayFlag)}
		}
		day = d
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	rep, err := ReconcileTransfers(ctx, pool, &idem.Config{Schema: schema}, *bankURL, day, *resolve)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "transfers of %s: %d bank records, %d calls, %d matched, %d discrepancies, %d resolved\n",
		day.Format(time.DateOnly), rep.InWindow, rep.Calls, rep.Matched, len(rep.Discrepancies), len(rep.Resolved))
	for _, d := range rep.Discrepancies {
		fmt.Fprintf(stdout, "  %s  tenant %s  bank key %s%s\n", d.Kind, d.Tenant, d.ProviderKey, errText(d.Error))
	}
	for _, r := range rep.Resolved {
		fmt.Fprintf(stdout, "  resolved as %s: tenant %s key_hash %s: %s\n", r.As, r.Tenant, r.Ours.KeyHash, r.Evidence)
	}
	if !rep.Clean() {
		return errDiscrepancies
	}
	return nil
}

func errText(e string) string {
	if e == "" {
		return ""
	}
	return " (not resolved: " + e + ")"
}

// errDiscrepancies ends `payments reconcile` with status 1.
var errDiscrepancies = errors.New("reconcile: discrepancies with the bank's report")
