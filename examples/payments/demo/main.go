// Command demo fires the duplicate-request scenario at a running payments example and prints
// what every request got. `make demo` (scripts/demo.sh) starts the server and runs this.
//
//	go run ./examples/payments/demo -url http://127.0.0.1:8080 -database-url postgres://…
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	base := fs.String("url", "http://127.0.0.1:8080", "base URL of the running payments example")
	dbURL := fs.String("database-url", "", "PostgreSQL URL the example uses, to count payments (default: $DATABASE_URL)")
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the server's /healthz")
	var t tools
	fs.StringVar(&t.idemgen, "idemgen", "", "the idemgen command, for the reconciliation steps")
	fs.StringVar(&t.payments, "payments", "", "the payments example's command, for its own reconciliation (payments reconcile)")
	fs.StringVar(&t.bankURL, "bank-url", "", "the bank the server transfers through, for its daily report")
	webhookSecret := fs.String("bank-webhook-secret", "", "the secret the server verifies the bank's settlement webhooks with (its -bank-webhook-secrets), to sign them as the bank")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" {
		*dbURL = os.Getenv("DATABASE_URL")
	}
	if *dbURL == "" {
		return errors.New("no database to count payments in: pass -database-url or set DATABASE_URL")
	}
	d := &demo{
		base:   strings.TrimRight(*base, "/"),
		dbURL:  *dbURL,
		client: &http.Client{Timeout: 30 * time.Second},
		out:    out,
		// A tenant of its own per run, so the demo can run again on the same database and its
		// count shows only what this run made.
		tenant: "demo-" + randomHex(4),
		tools:  t,

		webhookSecret: *webhookSecret,
	}
	dir, err := os.MkdirTemp("", "idemgen-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d.workDir = dir
	if err := d.waitHealthy(ctx, *wait); err != nil {
		return err
	}
	if err := d.scenario(ctx); err != nil {
		return err
	}
	if err := d.count(ctx); err != nil {
		return err
	}
	if len(d.unexpected) > 0 {
		return fmt.Errorf("%d answer(s) were not what idemgen promises:\n  %s", len(d.unexpected), strings.Join(d.unexpected, "\n  "))
	}
	return d.metrics(ctx)
}

type demo struct {
	base   string
	dbURL  string
	client *http.Client
	out    io.Writer
	tenant string
	tools  tools
	// workDir holds the bank's report files.
	workDir string
	// unexpected lists what this run got that the scenario does not promise; the demo fails
	// when it is not empty.
	unexpected []string
	// webhookSecret signs the bank's settlement webhooks (webhooks.go); "" skips that step.
	webhookSecret string
	// transferCharge is the bank's charge for the transfer of the transfers step, which the
	// bank's settlement webhook settles; "" when that step did not run.
	transferCharge string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *demo) waitHealthy(ctx context.Context, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := d.client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %s", resp.Status)
			}
			return fmt.Errorf("server at %s not healthy after %s: %w", d.base, wait, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// call is one request of the scenario and what it got.
type call struct {
	method, path, key, body string
	noTenant                bool

	status int
	header http.Header
	resp   []byte
}

func (d *demo) prepare(ctx context.Context, c *call) (*http.Request, error) {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, d.base+c.path, body)
	if err != nil {
		return nil, err
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if !c.noTenant {
		req.Header.Set("X-Tenant-ID", d.tenant)
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	return req, nil
}

func (d *demo) send(ctx context.Context, c *call) error {
	req, err := d.prepare(ctx, c)
	if err != nil {
		return err
	}
	return d.do(req, c)
}

func (d *demo) do(req *http.Request, c *call) error {
	resp, err := d.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.method, c.path, err)
	}
	defer resp.Body.Close()
	c.status, c.header = resp.StatusCode, resp.Header
	c.resp, err = io.ReadAll(resp.Body)
	return err
}

// together sends the calls at the same instant: every request is built and every goroutine
// started first, then a closed channel releases them all at once.
func (d *demo) together(ctx context.Context, calls ...*call) error {
	reqs := make([]*http.Request, len(calls))
	for i, c := range calls {
		r, err := d.prepare(ctx, c)
		if err != nil {
			return err
		}
		reqs[i] = r
	}
	start := make(chan struct{})
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-start
			errs[i] = d.do(reqs[i], calls[i])
		})
	}
	close(start)
	wg.Wait()
	return errors.Join(errs...)
}

func (d *demo) title(n int, s string) {
	fmt.Fprintf(d.out, "\n%d. %s\n", n, s)
}

// show prints one line per call: who, status, whether it was a replay, and the gist of the body.
func (d *demo) show(label string, c *call) {
	req := c.method + " " + c.path
	if c.body != "" {
		req += " " + c.body
	}
	keyNote := "no Idempotency-Key"
	if c.key != "" {
		keyNote = "key " + c.key
	}
	fmt.Fprintf(d.out, "   %s %s  (%s)\n", label, req, keyNote)
	verdict := fmt.Sprintf("%d %s", c.status, http.StatusText(c.status))
	if c.header.Get("Idempotent-Replayed") == "true" {
		verdict += ", Idempotent-Replayed: true"
	}
	if ra := c.header.Get("Retry-After"); ra != "" {
		verdict += ", Retry-After: " + ra
	}
	if c.status == http.StatusAccepted {
		verdict += ", Location: " + c.header.Get("Location")
	}
	fmt.Fprintf(d.out, "     → %s\n       %s\n", verdict, gist(c.resp))
}

// gist summarises a JSON answer on one line: a problem's code and detail, or the resource.
func gist(body []byte) string {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return strings.TrimSpace(string(body))
	}
	if code, ok := m["code"].(string); ok {
		return fmt.Sprintf("problem %s: %v", code, m["detail"])
	}
	var b bytes.Buffer
	_ = json.Compact(&b, body)
	return b.String()
}

// replayed reports whether c's answer is a stored one replayed.
func (c *call) replayed() bool { return c.header.Get("Idempotent-Replayed") == "true" }

// problem is the code of c's problem answer, or "".
func (c *call) problem() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(c.resp, &p)
	return p.Code
}

// say prints what happened, as one indented sentence per line.
func (d *demo) say(lines ...string) {
	for _, l := range lines {
		fmt.Fprintln(d.out, "   "+l)
	}
}

// expect says the sentence when ok and records the answer as unexpected otherwise, so the
// transcript only ever states what this run showed.
func (d *demo) expect(ok bool, sentence, unexpected string) {
	if ok {
		d.say(sentence)
		return
	}
	d.say("UNEXPECTED: " + unexpected)
	d.unexpected = append(d.unexpected, unexpected)
}

// doubleClick says what the two simultaneous requests of step 1 got, and returns the one that
// created the payment (nil if neither did).
func (d *demo) doubleClick(a, b *call) *call {
	created := func(c *call) bool { return c.status == http.StatusCreated && !c.replayed() }
	first, firstName, second, secondName := a, "A", b, "B"
	if created(b) && !created(a) {
		first, firstName, second, secondName = b, "B", a, "A"
	}
	switch {
	case !created(first):
		d.expect(false, "", fmt.Sprintf("neither request created the payment (A: %d, B: %d)", a.status, b.status))
		return nil
	case created(second):
		d.expect(false, "", "both requests created a payment: the key did not make the second one a duplicate")
	case second.status == http.StatusConflict && second.problem() == "in-progress":
		d.say(fmt.Sprintf("%s created the payment. %s arrived while %s was still running and got 409 in-progress:", firstName, secondName, firstName),
			fmt.Sprintf("it did not run, and may retry after Retry-After: %ss to get the stored answer.", second.header.Get("Retry-After")))
	case second.status == http.StatusCreated && second.replayed():
		d.say(fmt.Sprintf("%s created the payment. %s came a moment after %s had finished and got the stored 201 replayed:", firstName, secondName, firstName),
			"it did not run again.")
	default:
		d.expect(false, "", fmt.Sprintf("%s got %d %s, neither 409 in-progress nor the stored 201", secondName, second.status, second.problem()))
	}
	return first
}

func (d *demo) scenario(ctx context.Context) error {
	fmt.Fprintf(d.out, "idemgen payments demo: %s, tenant %s\n", d.base, d.tenant)
	key := "order-" + randomHex(6)
	body := `{"amount_minor": 19900, "currency": "RUB"}`

	d.title(1, "A double click: the same payment request twice at the same instant")
	a := &call{method: "POST", path: "/v1/payments", key: key, body: body}
	b := &call{method: "POST", path: "/v1/payments", key: key, body: body}
	if err := d.together(ctx, a, b); err != nil {
		return err
	}
	d.show("A", a)
	d.show("B", b)
	first := d.doubleClick(a, b)
	if first == nil {
		first = a
	}

	d.title(2, "A retry after the first request completed (a mobile client that lost the answer)")
	retry := &call{method: "POST", path: "/v1/payments", key: key, body: body}
	if err := d.send(ctx, retry); err != nil {
		return err
	}
	d.show("retry", retry)
	d.expect(retry.status == http.StatusCreated && retry.replayed() && bytes.Equal(retry.resp, first.resp),
		"The retry got the stored 201 replayed, its body byte for byte identical to the first answer.",
		fmt.Sprintf("the retry got %d (replayed: %v), not the first answer replayed byte for byte", retry.status, retry.replayed()))

	d.title(3, "The same key with another body (a client bug: the key must name one request)")
	other := &call{method: "POST", path: "/v1/payments", key: key, body: `{"amount_minor": 50000, "currency": "RUB"}`}
	if err := d.send(ctx, other); err != nil {
		return err
	}
	d.show("other", other)
	d.expect(other.status == http.StatusUnprocessableEntity && other.problem() == "key-reused",
		"Refused with 422 key-reused: the key already names another request, and nothing ran.",
		fmt.Sprintf("the same key with another body got %d %s, not 422 key-reused", other.status, other.problem()))

	d.title(4, "No Idempotency-Key at all")
	nokey := &call{method: "POST", path: "/v1/payments", body: body}
	if err := d.send(ctx, nokey); err != nil {
		return err
	}
	d.show("nokey", nokey)
	d.expect(nokey.status == http.StatusBadRequest && nokey.problem() == "key-missing",
		"Refused with 400 key-missing: a write without a key cannot be made safe to retry.",
		fmt.Sprintf("a request without a key got %d %s, not 400 key-missing", nokey.status, nokey.problem()))

	d.title(5, "No X-Tenant-ID (it stands in for authentication here)")
	anon := &call{method: "POST", path: "/v1/payments", key: "anon-" + randomHex(6), body: body, noTenant: true}
	if err := d.send(ctx, anon); err != nil {
		return err
	}
	d.show("anon", anon)
	d.expect(anon.status == http.StatusUnauthorized,
		"Refused with 401 before any key was claimed: an unauthenticated request never binds a key.",
		fmt.Sprintf("a request without a tenant got %d, not 401", anon.status))

	d.title(6, "The handler fails after writing the payment (simulate_failure: true), then the client retries")
	failKey := "order-" + randomHex(6)
	failing := &call{method: "POST", path: "/v1/payments", key: failKey,
		body: `{"amount_minor": 4200, "currency": "EUR", "simulate_failure": true}`}
	if err := d.send(ctx, failing); err != nil {
		return err
	}
	d.show("failing", failing)
	again := &call{method: "POST", path: "/v1/payments", key: failKey, body: `{"amount_minor": 4200, "currency": "EUR"}`}
	if err := d.send(ctx, again); err != nil {
		return err
	}
	d.show("retry", again)
	d.expect(failing.status == http.StatusInternalServerError && again.status == http.StatusCreated && !again.replayed(),
		"The failure rolled back the payment and released the key, so the retry ran afresh and created it\n"+
			"   (simulate_failure is excluded from the fingerprint: both are the same request).",
		fmt.Sprintf("the failing request got %d and its retry %d (replayed: %v), not 500 and then a fresh 201", failing.status, again.status, again.replayed()))

	var pay struct {
		PaymentID string `json:"payment_id"`
	}
	if err := json.Unmarshal(retry.resp, &pay); err != nil || pay.PaymentID == "" {
		return fmt.Errorf("the retry's answer has no payment_id (status %d): %s", retry.status, retry.resp)
	}

	d.title(7, "Capture (storage: reference): a replay shows the payment as it is NOW")
	capKey := "capture-" + randomHex(6)
	capture := &call{method: "POST", path: "/v1/payments/" + pay.PaymentID + "/capture", key: capKey}
	if err := d.send(ctx, capture); err != nil {
		return err
	}
	d.show("capture", capture)
	refKey := "refund-" + randomHex(6)
	refund := &call{method: "POST", path: "/v1/payments/" + pay.PaymentID + "/refunds", key: refKey, body: `{"amount_minor": 5000}`}
	if err := d.send(ctx, refund); err != nil {
		return err
	}
	d.show("refund", refund)
	capAgain := &call{method: "POST", path: capture.path, key: capKey}
	if err := d.send(ctx, capAgain); err != nil {
		return err
	}
	d.show("capture again", capAgain)
	var now struct {
		Refunded int64 `json:"amount_refunded_minor"`
	}
	_ = json.Unmarshal(capAgain.resp, &now)
	d.expect(capture.status == http.StatusOK && capAgain.status == http.StatusOK && capAgain.replayed() && now.Refunded == 5000,
		"The replay reloaded the payment: it shows the 5000 refunded after the capture, and nothing was captured twice.",
		fmt.Sprintf("capture got %d, its replay %d (replayed: %v) with %d refunded; want 200, a replayed 200 and 5000", capture.status, capAgain.status, capAgain.replayed(), now.Refunded))

	d.title(8, "Refund (storage: marker): a replay recomputes the answer")
	var rf struct {
		RefundID string `json:"refund_id"`
	}
	if err := json.Unmarshal(refund.resp, &rf); err != nil || rf.RefundID == "" {
		return fmt.Errorf("the refund's answer has no refund_id (status %d): %s", refund.status, refund.resp)
	}
	fmt.Fprintf(d.out, "   (the card processor settles refund %s: its status becomes succeeded)\n", rf.RefundID)
	if err := d.settle(ctx, rf.RefundID); err != nil {
		return err
	}
	refAgain := &call{method: "POST", path: refund.path, key: refKey, body: refund.body}
	if err := d.send(ctx, refAgain); err != nil {
		return err
	}
	d.show("refund again", refAgain)
	var settled struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(refAgain.resp, &settled)
	d.expect(refAgain.status == http.StatusCreated && refAgain.replayed() && settled.Status == "succeeded",
		"Only the status was stored; the answer was rebuilt and shows the refund as it is now, succeeded.\n"+
			"   No second refund was made.",
		fmt.Sprintf("the refund's replay got %d (replayed: %v) with status %q; want a replayed 201 with status succeeded", refAgain.status, refAgain.replayed(), settled.Status))
	if err := d.payout(ctx, 9); err != nil {
		return err
	}
	if err := d.transfers(ctx, 10); err != nil {
		return err
	}
	return d.webhooks(ctx, 12)
}

// settle plays the card processor: it marks the refund succeeded, directly in the database,
// because the example has no processor of its own.
func (d *demo) settle(ctx context.Context, refundID string) error {
	return d.withDB(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, `UPDATE refunds SET status = 'succeeded' WHERE tenant_id = $1 AND refund_id = $2`, d.tenant, refundID)
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("refund %s not found in the database the server uses (is -database-url the same?)", refundID)
		}
		return err
	})
}

func (d *demo) withDB(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, d.dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer conn.Close(ctx)
	return fn(conn)
}

// count prints, as a table, what this run's tenant has in the database next to what the
// requests above should have left, and fails when a retry was executed twice: the ledger
// (payment_events) gets one row per execution that moved money, with no unique key that could
// absorb a second one.
func (d *demo) count(ctx context.Context) error {
	return d.withDB(ctx, func(conn *pgx.Conn) error {
		var payments, refunds, authorized, captured, refunded int
		err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM payments WHERE tenant_id = $1),
			(SELECT count(*) FROM refunds WHERE tenant_id = $1),
			(SELECT count(*) FROM payment_events WHERE tenant_id = $1 AND kind = 'authorized'),
			(SELECT count(*) FROM payment_events WHERE tenant_id = $1 AND kind = 'captured'),
			(SELECT count(*) FROM payment_events WHERE tenant_id = $1 AND kind = 'refunded')`,
			d.tenant).Scan(&payments, &refunds, &authorized, &captured, &refunded)
		if err != nil {
			return fmt.Errorf("count payments: %w", err)
		}
		rows := []struct {
			what, requests string
			want, found    int
		}{
			{"payments", "8 creates: 3 with one key and body, 2 with another key, 3 refused (422, 400, 401)", 2, payments},
			{"ledger: authorizations", "one per payment made", 2, authorized},
			{"ledger: captures", "2 captures with one key", 1, captured},
			{"refunds", "2 refunds with one key", 1, refunds},
			{"ledger: refunds", "one per refund made", 1, refunded},
		}
		fmt.Fprintf(d.out, "\nWhat this run left in the database (tenant %s):\n", d.tenant)
		fmt.Fprintf(d.out, "  %-24s %5s %5s     %s\n", "", "want", "found", "from")
		wrong := 0
		for _, r := range rows {
			mark := "ok"
			if r.found != r.want {
				mark, wrong = "WRONG", wrong+1
			}
			fmt.Fprintf(d.out, "  %-24s %5d %5d %-5s %s\n", r.what, r.want, r.found, mark, r.requests)
		}
		if wrong > 0 {
			return fmt.Errorf("%d count(s) differ from what the requests should have left for tenant %s: a retry was executed twice, or a request that should have run did not", wrong, d.tenant)
		}
		fmt.Fprintln(d.out, "Every key ran its handler once: no retry was executed twice.")
		return nil
	})
}
