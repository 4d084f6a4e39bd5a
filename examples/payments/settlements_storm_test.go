package payments

// The bank's settlement webhooks in a redelivery storm: a sender that signs every attempt the
// Standard Webhooks way and delivers each event until it gets a 2xx, against the example server
// run as a child process that is killed (SIGKILL) and started again several times, with some
// attempts cut by the sender before the answer. Every event must have exactly one effect, and the
// sender must give up on none. Forged, expired and unsigned deliveries must leave no row and no key.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

// restartChildSlowSettlement makes the child's settlement handler hold its transaction this long
// (a Go duration) at its insert, so that kills and cut connections land inside handlers.
const restartChildSlowSettlement = "IDEMGEN_RESTART_CHILD_SLOW_SETTLEMENT"

// slowSettlements is a pgx tracer that sleeps d before each insert into bank_settlements.
type slowSettlements time.Duration

func (d slowSettlements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "INSERT INTO bank_settlements") {
		time.Sleep(time.Duration(d))
	}
	return ctx
}

func (slowSettlements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

const (
	stormSecret    = "whsec_c3Rvcm0tdGVzdC1zZWNyZXQtZm9yLXRoZS1iYW5r"
	stormOldSecret = "whsec_b2xkLXNlY3JldC1zdGlsbC1hY2NlcHRlZA=="
)

// webhookSender delivers events the way a Standard Webhooks sender does: each attempt signed anew
// (a fresh webhook-timestamp), the same webhook-id and body on every attempt, again after any
// answer that is not 2xx and after any transport error, with a short backoff, until a 2xx or
// maxAttempts.
type webhookSender struct {
	url         string
	secret      string
	maxAttempts int
	// cut is the share of attempts the sender abandons after a few milliseconds, as a sender
	// whose timeout fires or whose connection breaks does: the receiver may be mid-handler.
	cut float64

	attempts, cuts, transportErrors, non2xx, replayed atomic.Int64
}

// deliver sends one event until it is accepted; it returns false when the sender gave up.
func (s *webhookSender) deliver(ctx context.Context, id string, body []byte) bool {
	for attempt := 1; attempt <= s.maxAttempts; attempt++ {
		s.attempts.Add(1)
		status, replay, err := s.attempt(ctx, id, body)
		switch {
		case err == nil && status >= 200 && status <= 299:
			if replay {
				s.replayed.Add(1)
			}
			return true
		case err != nil:
			s.transportErrors.Add(1)
		default:
			s.non2xx.Add(1)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(20+rand.IntN(180)) * time.Millisecond):
		}
	}
	return false
}

func (s *webhookSender) attempt(ctx context.Context, id string, body []byte) (status int, replayed bool, err error) {
	if rand.Float64() < s.cut {
		s.cuts.Add(1)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(2+rand.IntN(40))*time.Millisecond)
		defer cancel()
	}
	now := time.Now()
	sig, err := idemwebhook.SignStandard(id, now, body, s.secret)
	if err != nil {
		return 0, false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, strings.NewReader(string(body)))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// TestSettlementWebhookStorm: 80 events delivered by 8 sender workers, each event also delivered
// again after it succeeded, while the receiver is killed four times and a quarter of the attempts
// are cut: every event has exactly one row, every key is complete, the sender gave up on none.
// Then forged, expired and unsigned deliveries are refused with 401 and leave nothing.
func TestSettlementWebhookStorm(t *testing.T) {
	t.Parallel()
	schema := idemtest.TestSchema(t, nil)
	ctx := context.Background()
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	// The receiver accepts the new secret and the one being rotated out; the sender signs with
	// the new one.
	childEnv := []string{webhookSecretsEnv + "=" + stormSecret + "," + stormOldSecret, restartChildSlowSettlement + "=30ms"}
	child := startChild(t, "receiver", schema, addr, false, childEnv...)

	const events, workers = 80, 8
	sender := &webhookSender{url: "http://" + addr + "/webhooks/bank/settlements", secret: stormSecret, maxAttempts: 200, cut: 0.25}
	stormCtx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()

	ids := make([]string, events)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt_storm_%03d", i)
	}
	var gaveUp atomic.Int64
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range jobs {
				body := []byte(fmt.Sprintf(`{"type":"charge.settled","charge_id":"ch_%s","amount_minor":1500,"currency":"EUR"}`, id))
				if !sender.deliver(stormCtx, id, body) {
					gaveUp.Add(1)
					continue
				}
				// The sender delivers it once more, as one whose first 2xx was lost does.
				if !sender.deliver(stormCtx, id, body) {
					gaveUp.Add(1)
				}
			}
		})
	}
	sendersDone := make(chan struct{})
	go func() {
		defer close(sendersDone)
		for _, id := range ids {
			jobs <- id
			time.Sleep(15 * time.Millisecond) // spread the events over the kills
		}
		close(jobs)
		wg.Wait()
	}()

	// The killer, on the test's goroutine (startChild may fail the test): four times, SIGKILL
	// the receiver while deliveries run, and start it again on the same address after a pause.
	kills := 0
	for range 4 {
		select {
		case <-sendersDone:
		case <-time.After(time.Duration(600+rand.IntN(600)) * time.Millisecond):
		}
		child.kill()
		kills++
		time.Sleep(300 * time.Millisecond)
		child = startChild(t, "receiver", schema, addr, false, childEnv...)
	}
	select {
	case <-sendersDone:
	case <-stormCtx.Done():
	}
	if err := stormCtx.Err(); err != nil {
		t.Fatalf("the storm did not end within 4 minutes: %v", err)
	}

	rows := map[string]int{}
	r, err := schema.Pool.Query(ctx, `SELECT event_id, count(*) FROM bank_settlements GROUP BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var id string
		var n int
		if err := r.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		rows[id] = n
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	missing, doubled := 0, 0
	for _, id := range ids {
		switch n := rows[id]; {
		case n == 0:
			missing++
		case n > 1:
			doubled++
			t.Errorf("event %s has %d rows, want 1", id, n)
		}
	}
	keyTable := pgx.Identifier{schema.Name, schema.Table}.Sanitize()
	// attempt > 1: the key's first claim was lost (its receiver killed, or its handler cut) and a
	// redelivery took it over.
	var keys, complete, takenOver int
	if err := schema.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'complete'), count(*) FILTER (WHERE attempt > 1) FROM `+keyTable+` WHERE operation = 'receiveBankSettlement'`).Scan(&keys, &complete, &takenOver); err != nil {
		t.Fatal(err)
	}
	t.Logf("storm: %d events, %d sender workers, receiver killed %d times; %d attempts (%d cut by the sender, %d transport errors, %d non-2xx answers), %d replayed 2xx; rows: %d events with exactly one, %d missing, %d doubled; keys: %d (%d complete, %d taken over after a lost first claim); the sender gave up on %d",
		events, workers, kills, sender.attempts.Load(), sender.cuts.Load(), sender.transportErrors.Load(), sender.non2xx.Load(), sender.replayed.Load(),
		len(ids)-missing-doubled, missing, doubled, keys, complete, takenOver, gaveUp.Load())
	if missing > 0 || doubled > 0 || gaveUp.Load() > 0 {
		t.Fatalf("%d events without their effect, %d with it twice, %d deliveries given up; want 0, 0, 0", missing, doubled, gaveUp.Load())
	}
	if keys != events || complete != events {
		t.Errorf("%d keys (%d complete) for %d events; want one complete key per event", keys, complete, events)
	}
	if sender.replayed.Load() < events {
		t.Errorf("%d replayed answers; every event was delivered again after it succeeded, so want at least %d", sender.replayed.Load(), events)
	}

	// Refused deliveries: each kind several times, on the receiver that is up now.
	url := "http://" + addr + "/webhooks/bank/settlements"
	body := []byte(`{"type":"charge.settled","charge_id":"ch_forged","amount_minor":999999,"currency":"EUR"}`)
	refusals := []struct {
		name string
		sign func(h http.Header, id string)
	}{
		{"forged (signed with a guessed secret)", func(h http.Header, id string) {
			sig, _ := idemwebhook.SignStandard(id, time.Now(), body, "whsec_Z3Vlc3NlZC1ieS1hbi1hdHRhY2tlcg==")
			h.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
			h.Set("webhook-signature", sig)
		}},
		{"expired (a captured delivery replayed an hour later)", func(h http.Header, id string) {
			old := time.Now().Add(-time.Hour)
			sig, _ := idemwebhook.SignStandard(id, old, body, stormSecret)
			h.Set("webhook-timestamp", strconv.FormatInt(old.Unix(), 10))
			h.Set("webhook-signature", sig)
		}},
		{"unsigned", func(h http.Header, id string) {
			h.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		}},
	}
	var refusedIDs []string
	for _, rf := range refusals {
		for i := range 5 {
			id := fmt.Sprintf("evt_refused_%s_%d", strings.Fields(rf.name)[0], i)
			refusedIDs = append(refusedIDs, id)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("webhook-id", id)
			rf.sign(req.Header, id)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s delivery: %v", rf.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s delivery %s: %d, want 401", rf.name, id, resp.StatusCode)
			}
		}
	}
	var refusedRows, refusedKeys int
	if err := schema.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM bank_settlements WHERE event_id = ANY($1)), (SELECT count(*) FROM `+keyTable+` WHERE key = ANY($1))`, refusedIDs).
		Scan(&refusedRows, &refusedKeys); err != nil {
		t.Fatal(err)
	}
	t.Logf("refused: %d forged, expired and unsigned deliveries; %d rows, %d keys", len(refusedIDs), refusedRows, refusedKeys)
	if refusedRows != 0 || refusedKeys != 0 {
		t.Errorf("refused deliveries left %d rows and %d keys; want 0 and 0", refusedRows, refusedKeys)
	}
}
