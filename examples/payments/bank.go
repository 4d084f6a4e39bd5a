package payments

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The fake bank: the provider the payout worker pays through. It is a real HTTP server with a
// table of its own (bank.sql) and its own Idempotency-Key check, so it behaves like a real
// provider where it matters here: a call with a key it has seen is answered with the first
// call's charge, never charged again. The example server runs it on a loopback port unless
// -bank-url names another; the tests run it on an httptest server and count its rows.

//go:embed bank.sql
var bankSQL string

// bankProvider is the provider name payout keys are derived for (idem.DerivedKey).
const bankProvider = "bank"

// bank serves POST /charges.
type bank struct {
	db *pgxpool.Pool
	// afterCharge, when set, runs after a charge is committed and before the answer is sent,
	// with the call's key and how many calls carried it: the tests use it to stall the answer
	// (a timeout after the charge) or to kill the worker while the bank has charged.
	afterCharge func(ctx context.Context, key string, calls int)
}

// chargeRequest is the body of POST /charges.
type chargeRequest struct {
	Account     string `json:"account"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	// Purpose is what the charge is for, "payout" (the default) or "transfer"; the bank's report
	// can be asked for one purpose, as a provider's report is per product.
	Purpose string `json:"purpose,omitempty"`
}

// chargeAnswer is the bank's answer: the charge, or why it was declined.
type chargeAnswer struct {
	ChargeID string `json:"charge_id,omitempty"`
	Declined string `json:"declined,omitempty"`
}

// declinedPrefix marks the accounts the bank refuses, so the tests and the demo can show a failed
// payout: a decline is decided by the request alone, so it is the same on every call.
const declinedPrefix = "closed-"

// The purposes of a charge (chargeRequest.Purpose).
const (
	purposePayout   = "payout"
	purposeTransfer = "transfer"
)

// lostAnswerPrefix marks the accounts whose charge the bank makes and then never answers, as a
// provider does when its answer is lost on the way (a cut connection, a gateway timeout): the
// caller cannot tell whether it was charged. The demo uses it to show an uncertain key.
const lostAnswerPrefix = "lost-answer-"

func (b *bank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/reports/charges" {
		b.serveReport(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/charges" {
		http.Error(w, "the bank serves POST /charges and GET /reports/charges?day=YYYY-MM-DD", http.StatusNotFound)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
		return
	}
	var req chargeRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.AmountMinor < 1 || req.Account == "" {
		http.Error(w, "want a JSON body with account and a positive amount_minor", http.StatusBadRequest)
		return
	}
	if req.Purpose == "" {
		req.Purpose = purposePayout
	}
	if strings.HasPrefix(req.Account, declinedPrefix) {
		writeJSON(w, http.StatusPaymentRequired, chargeAnswer{Declined: "account " + req.Account + " is closed"})
		return
	}
	// One statement charges or finds the charge this key made, and counts the call.
	var (
		got   chargeRequest
		id    string
		calls int
	)
	err := b.db.QueryRow(r.Context(), `
		INSERT INTO bank_charges (idempotency_key, account, amount_minor, currency, purpose)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (idempotency_key) DO UPDATE SET calls = bank_charges.calls + 1
		RETURNING charge_id::text, account, amount_minor, currency, purpose, calls`,
		key, req.Account, req.AmountMinor, req.Currency, req.Purpose).Scan(&id, &got.Account, &got.AmountMinor, &got.Currency, &got.Purpose, &calls)
	if err != nil {
		http.Error(w, "the bank is unavailable", http.StatusServiceUnavailable)
		return
	}
	if got != req {
		http.Error(w, "this Idempotency-Key was used for another charge", http.StatusUnprocessableEntity)
		return
	}
	if b.afterCharge != nil {
		b.afterCharge(r.Context(), key, calls)
	}
	if strings.HasPrefix(req.Account, lostAnswerPrefix) {
		<-r.Context().Done() // charged; the answer never leaves
		return
	}
	writeJSON(w, http.StatusCreated, chargeAnswer{ChargeID: id})
}

// serveReport answers GET /reports/charges?day=YYYY-MM-DD[&purpose=transfer] with the bank's
// daily report: every charge it made that day (UTC), for one purpose when asked, as CSV with a header row, the way providers publish settlement
// reports. idemgen reconcile reads it (docs/reconcile.md); the derived key the caller sent is the
// idempotency_key column.
func (b *bank) serveReport(w http.ResponseWriter, r *http.Request) {
	day, err := time.Parse(time.DateOnly, r.URL.Query().Get("day"))
	if err != nil {
		http.Error(w, "want ?day=YYYY-MM-DD", http.StatusBadRequest)
		return
	}
	var buf bytes.Buffer
	if err := writeBankReport(r.Context(), b.db, day, r.URL.Query().Get("purpose"), &buf); err != nil {
		http.Error(w, "the bank's report is unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	_, _ = w.Write(buf.Bytes()) // a caller that went away asks again
}

// bankReportColumns is the report's header row.
var bankReportColumns = []string{"charge_id", "idempotency_key", "account", "amount_minor", "currency", "purpose", "created_at"}

// writeBankReport writes the charges the bank made on day (UTC) to w as CSV, oldest first; for
// one purpose when purpose is not "".
func writeBankReport(ctx context.Context, pool *pgxpool.Pool, day time.Time, purpose string, w io.Writer) error {
	from := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	rows, err := pool.Query(ctx, `
		SELECT charge_id::text, idempotency_key, account, amount_minor, currency, purpose, created_at
		FROM bank_charges WHERE created_at >= $1 AND created_at < $2 AND ($3 = '' OR purpose = $3)
		ORDER BY created_at, charge_id`, from, from.AddDate(0, 0, 1), purpose)
	if err != nil {
		return err
	}
	defer rows.Close()
	cw := csv.NewWriter(w)
	if err := cw.Write(bankReportColumns); err != nil {
		return err
	}
	for rows.Next() {
		var id, key, account, currency, purpose string
		var amount int64
		var at time.Time
		if err := rows.Scan(&id, &key, &account, &amount, &currency, &purpose, &at); err != nil {
			return err
		}
		if err := cw.Write([]string{id, key, account, strconv.FormatInt(amount, 10), currency, purpose, at.UTC().Format(time.RFC3339Nano)}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a caller that went away retries with the same key
}

// migrateBank creates the bank's table.
func migrateBank(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockID)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, bankSQL)
		return err
	}); err != nil {
		return fmt.Errorf("create the fake bank's table: %w", err)
	}
	return nil
}

// serveFakeBank serves the fake bank on a free loopback port, for a server run without
// -bank-url (the demo). stop shuts it down.
func serveFakeBank(pool *pgxpool.Pool, log *slog.Logger) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("fake bank: %w", err)
	}
	srv := newServer(&bank{db: pool})
	go func() { _ = srv.Serve(ln) }() // ends with ErrServerClosed on stop
	url = "http://" + ln.Addr().String()
	log.Info("fake bank listening", "url", url)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, url, nil
}

// bankClient calls the bank for the payout worker.
type bankClient struct {
	url  string
	http *http.Client
}

func newBankClient(url string, timeout time.Duration) *bankClient {
	return &bankClient{url: strings.TrimRight(url, "/"), http: &http.Client{Timeout: timeout}}
}

// errDeclined wraps the bank's refusal, which is final: retrying cannot change it.
var errDeclined = errors.New("declined by the bank")

// charge asks the bank to charge req under key. It returns the charge's id, an error wrapping
// errDeclined for a refusal, or another error (a timeout, a 5xx, a lost connection) after which
// the outcome is unknown: the bank may have charged. Only a retry with the same key can find out
// without charging twice, which is why key must be derived from the request, never made afresh.
func (c *bankClient) charge(ctx context.Context, key string, req chargeRequest) (string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/charges", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", key)
	resp, err := c.http.Do(hr)
	if err != nil {
		return "", fmt.Errorf("bank: %w", err)
	}
	defer resp.Body.Close()
	var a chargeAnswer
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusPaymentRequired:
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&a); err != nil {
			return "", fmt.Errorf("bank: read the answer: %w", err)
		}
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("bank: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	if a.Declined != "" {
		return "", fmt.Errorf("%w: %s", errDeclined, a.Declined)
	}
	if a.ChargeID == "" {
		return "", errors.New("bank: a 201 without a charge_id")
	}
	return a.ChargeID, nil
}
