package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// The webhook step: the bank's settlement event delivered to the server's receiver, delivered
// again (the bank did not get the first 2xx), and a forged delivery. The demo plays the bank: it
// signs with the secret the server was started with.

// delivery is one webhook delivery and what it got.
type delivery struct {
	id     string
	body   string
	secret string    // the secret it is signed with
	at     time.Time // its webhook-timestamp
	call
}

func (d *demo) deliver(ctx context.Context, w *delivery) error {
	sig, err := idemwebhook.SignStandard(w.id, w.at, []byte(w.body), w.secret)
	if err != nil {
		return err
	}
	w.method, w.path = "POST", "/webhooks/bank/settlements"
	req, err := http.NewRequestWithContext(ctx, w.method, d.base+w.path, strings.NewReader(w.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", w.id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(w.at.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	return d.do(req, &w.call)
}

func (d *demo) showDelivery(label string, w *delivery) {
	fmt.Fprintf(d.out, "   %s POST /webhooks/bank/settlements  (webhook-id %s)\n", label, w.id)
	verdict := fmt.Sprintf("%d %s", w.status, http.StatusText(w.status))
	if w.replayed() {
		verdict += ", Idempotent-Replayed: true"
	}
	fmt.Fprintf(d.out, "     → %s\n       %s\n", verdict, gist(w.resp))
}

// countEvent returns how many rows the receiver wrote for event id, and how many keys it holds.
func (d *demo) countEvent(ctx context.Context, id string) (rows, keys int, err error) {
	conn, err := pgx.Connect(ctx, d.dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM bank_settlements WHERE event_id = $1),
		(SELECT count(*) FROM idempotency_keys WHERE operation = 'receiveBankSettlement' AND key = $1)`, id).Scan(&rows, &keys)
	return rows, keys, err
}

func (d *demo) webhooks(ctx context.Context, step int) error {
	if d.webhookSecret == "" {
		d.say("(the settlement webhook skipped: run with -bank-webhook-secret, as make demo does)")
		return nil
	}
	d.title(step, "The bank's settlement webhook: delivered, delivered again, and forged")
	id := "evt_" + randomHex(8)
	charge, settles := d.transferCharge, "the transfer of step 10"
	if charge == "" {
		charge, settles = "ch_demo_"+randomHex(4), "no transfer (a charge of no transfer of ours)"
	}
	body := `{"type": "charge.settled", "charge_id": "` + charge + `", "amount_minor": 12500, "currency": "EUR"}`
	first := &delivery{id: id, body: body, secret: d.webhookSecret, at: time.Now()}
	if err := d.deliver(ctx, first); err != nil {
		return err
	}
	d.showDelivery("bank", first)
	d.expect(first.status == http.StatusOK && !first.replayed(),
		"The signature (Standard Webhooks, HMAC-SHA256) was verified first; then the webhook-id was claimed,\n"+
			"   the event recorded and "+settles+" marked settled, in one transaction.",
		fmt.Sprintf("the first delivery got %d; want 200", first.status))

	again := &delivery{id: id, body: body, secret: d.webhookSecret, at: time.Now().Add(time.Second)}
	if err := d.deliver(ctx, again); err != nil {
		return err
	}
	d.showDelivery("bank again", again)
	rows, _, err := d.countEvent(ctx, id)
	if err != nil {
		return err
	}
	d.expect(again.status == http.StatusOK && again.replayed() && bytes.Equal(again.resp, first.resp) && rows == 1,
		fmt.Sprintf("The redelivery (signed anew, same webhook-id) got the stored 200; the event has %d row: one effect.", rows),
		fmt.Sprintf("the redelivery got %d (replayed: %v) and the event has %d rows; want the stored 200 and 1 row", again.status, again.replayed(), rows))

	forgedID := "evt_" + randomHex(8)
	forged := &delivery{id: forgedID, body: strings.Replace(body, "12500", "9999999", 1),
		secret: "whsec_" + "Zm9yZ2VkLWJ5LXNvbWVvbmUtd2l0aG91dC10aGUtc2VjcmV0", at: time.Now()}
	if err := d.deliver(ctx, forged); err != nil {
		return err
	}
	d.showDelivery("forger", forged)
	rows, keys, err := d.countEvent(ctx, forgedID)
	if err != nil {
		return err
	}
	d.expect(forged.status == http.StatusUnauthorized && forged.problem() == "signature-invalid" && rows == 0 && keys == 0,
		"Signed with another secret: 401 signature-invalid before anything was claimed; no row, no key.",
		fmt.Sprintf("the forged delivery got %d %s and left %d rows and %d keys; want 401 signature-invalid, 0 and 0", forged.status, forged.problem(), rows, keys))
	return nil
}
