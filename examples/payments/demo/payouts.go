package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// payout is the long operation: POST /v1/payouts answers 202 with the Location of its status
// resource, a River worker pays it out through the (fake) bank, and the status turns succeeded.
// Retries before and after that replay the same 202.
func (d *demo) payout(ctx context.Context, step int) error {
	d.title(step, "A long operation: a payout answers 202 + Location, and a worker pays it through the bank")
	key := "payout-" + randomHex(6)
	body := `{"amount_minor": 500000, "currency": "RUB", "account": "40817810099910004312"}`
	first := &call{method: "POST", path: "/v1/payouts", key: key, body: body}
	if err := d.send(ctx, first); err != nil {
		return err
	}
	d.show("payout", first)
	loc := first.header.Get("Location")
	if first.status != http.StatusAccepted || loc == "" {
		d.expect(false, "", fmt.Sprintf("the payout got %d with Location %q, not 202 with a Location", first.status, loc))
		return nil
	}
	retry := &call{method: "POST", path: "/v1/payouts", key: key, body: body}
	if err := d.send(ctx, retry); err != nil {
		return err
	}
	d.show("retry", retry)
	d.expect(sameAccepted(first, retry),
		"The retry got the same 202 replayed, with the same Location: the payout was enqueued once.",
		fmt.Sprintf("the retry got %d (replayed: %v, Location %q), not the first 202 replayed", retry.status, retry.replayed(), retry.header.Get("Location")))

	// Poll the status resource until the worker has finished, printing each status once.
	var status, last string
	deadline := time.Now().Add(30 * time.Second)
	for status != "succeeded" && status != "failed" {
		if time.Now().After(deadline) {
			d.expect(false, "", fmt.Sprintf("the payout was still %s after 30s: no worker finished it", status))
			return nil
		}
		get := &call{method: "GET", path: loc}
		if err := d.send(ctx, get); err != nil {
			return err
		}
		var p struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(get.resp, &p)
		status = p.Status
		if status != last {
			d.show("status", get)
			last = status
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := &call{method: "POST", path: "/v1/payouts", key: key, body: body}
	if err := d.send(ctx, after); err != nil {
		return err
	}
	d.show("retry after", after)
	d.expect(status == "succeeded" && sameAccepted(first, after),
		"The status turned succeeded; a retry now still gets the first 202 and Location (the answer the key\n"+
			"   stored), and the status resource says how it ended.",
		fmt.Sprintf("the payout ended %s and the late retry got %d (replayed: %v); want succeeded and the first 202 replayed", status, after.status, after.replayed()))

	var charges int
	if err := d.withDB(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT count(*) FROM bank_charges b JOIN payouts p ON p.bank_charge_id = b.charge_id::text
			WHERE p.tenant_id = $1`, d.tenant).Scan(&charges)
	}); err != nil {
		return fmt.Errorf("count the bank's charges: %w", err)
	}
	d.expect(charges == 1,
		"The bank holds one charge for it: the worker sent a key derived from the request, so a job\n"+
			"   that runs again after a crash would be answered with this charge, not make a second.",
		fmt.Sprintf("the bank holds %d charges for this run's payout; want 1", charges))
	return nil
}

// sameAccepted reports whether b is a's 202 replayed: the same Location and body.
func sameAccepted(a, b *call) bool {
	return b.status == http.StatusAccepted && b.replayed() &&
		b.header.Get("Location") == a.header.Get("Location") && bytes.Equal(a.resp, b.resp)
}
