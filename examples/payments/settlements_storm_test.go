package payments

// The bank's settlement webhooks in a redelivery storm: a sender process that signs every attempt
// the Standard Webhooks way and delivers each event until it gets a 2xx, against the example
// server run as another process that is killed (SIGKILL) and started again several times, with
// some attempts cut by the sender before the answer. Every event must have exactly one effect, and the
// sender must give up on none. Forged, expired and unsigned deliveries must leave no row and no key.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
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

// The sender child: this test binary, told by these variables where to deliver what.
const (
	senderChildURL     = "IDEMGEN_SENDER_CHILD_URL"
	senderChildSecret  = "IDEMGEN_SENDER_CHILD_SECRET"
	senderChildEvents  = "IDEMGEN_SENDER_CHILD_EVENTS"
	senderChildWorkers = "IDEMGEN_SENDER_CHILD_WORKERS"
)

// senderStats is what the sender child prints when it is done, one line of JSON.
type senderStats struct {
	Attempts, Cuts, TransportErrors, Non2xx, Replayed, GaveUp int64
}

// senderChild delivers events evt_storm_000… to the receiver, each until it gets a 2xx and once
// more after it did (as a sender whose first 2xx was lost), with workers delivering at once,
// then prints its senderStats. It ends itself after four minutes, should the parent die first.
func senderChild() int {
	time.AfterFunc(4*time.Minute, func() { os.Exit(3) })
	events, err1 := strconv.Atoi(os.Getenv(senderChildEvents))
	workers, err2 := strconv.Atoi(os.Getenv(senderChildWorkers))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "sender child:", err)
		return 2
	}
	s := &webhookSender{url: os.Getenv(senderChildURL), secret: os.Getenv(senderChildSecret), maxAttempts: 200, cut: 0.25}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var gaveUp atomic.Int64
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for id := range jobs {
				body := []byte(fmt.Sprintf(`{"type":"charge.settled","charge_id":"ch_%s","amount_minor":1500,"currency":"EUR"}`, id))
				for range 2 {
					if !s.deliver(ctx, id, body) {
						gaveUp.Add(1)
						break
					}
				}
			}
		})
	}
	for i := range events {
		jobs <- stormEventID(i)
		time.Sleep(15 * time.Millisecond) // spread the events over the receiver's kills
	}
	close(jobs)
	wg.Wait()
	out, _ := json.Marshal(senderStats{s.attempts.Load(), s.cuts.Load(), s.transportErrors.Load(), s.non2xx.Load(), s.replayed.Load(), gaveUp.Load()})
	fmt.Println(string(out))
	return 0
}

func stormEventID(i int) string { return fmt.Sprintf("evt_storm_%03d", i) }

// TestSettlementWebhookStorm: 80 events delivered by a sender process with 8 workers, each event
// also delivered again after it succeeded, while the receiver process is killed four times and a
// quarter of the attempts are cut: every event has exactly one row, every key is complete, the
// sender gave up on none. Then forged, expired and unsigned deliveries are refused with 401 and
// leave nothing.
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
	url := "http://" + addr + "/webhooks/bank/settlements"
	sender := exec.Command(os.Args[0], "-test.run=^$")
	sender.Env = append(os.Environ(), senderChildURL+"="+url, senderChildSecret+"="+stormSecret,
		senderChildEvents+"="+strconv.Itoa(events), senderChildWorkers+"="+strconv.Itoa(workers))
	sender.Stderr = tWriter{t}
	var senderOut strings.Builder
	sender.Stdout = &senderOut
	if err := sender.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sender.Process.Kill() })
	senderDone := make(chan error, 1)
	go func() { senderDone <- sender.Wait() }()

	// Four times, SIGKILL the receiver while deliveries run, and start it again on the same
	// address after a pause.
	kills := 0
	var senderErr error
	finished := false
	for range 4 {
		select {
		case senderErr = <-senderDone:
			finished = true
		case <-time.After(time.Duration(600+rand.IntN(600)) * time.Millisecond):
		}
		if finished {
			break
		}
		child.kill()
		kills++
		time.Sleep(300 * time.Millisecond)
		child = startChild(t, "receiver", schema, addr, false, childEnv...)
	}
	if !finished {
		select {
		case senderErr = <-senderDone:
		case <-time.After(4 * time.Minute):
			t.Fatal("the sender process did not finish within 4 minutes")
		}
	}
	var st senderStats
	if senderErr != nil || json.Unmarshal([]byte(strings.TrimSpace(senderOut.String())), &st) != nil {
		t.Fatalf("the sender process: %v, printed %q", senderErr, senderOut.String())
	}
	ids := make([]string, events)
	for i := range ids {
		ids[i] = stormEventID(i)
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
	t.Logf("storm: %d events, a sender process with %d workers, receiver killed %d times; %d attempts (%d cut by the sender, %d transport errors, %d non-2xx answers), %d replayed 2xx; rows: %d events with exactly one, %d missing, %d doubled; keys: %d (%d complete, %d taken over after a lost first claim); the sender gave up on %d",
		events, workers, kills, st.Attempts, st.Cuts, st.TransportErrors, st.Non2xx, st.Replayed,
		len(ids)-missing-doubled, missing, doubled, keys, complete, takenOver, st.GaveUp)
	if missing > 0 || doubled > 0 || st.GaveUp > 0 {
		t.Fatalf("%d events without their effect, %d with it twice, %d deliveries given up; want 0, 0, 0", missing, doubled, st.GaveUp)
	}
	if keys != events || complete != events {
		t.Errorf("%d keys (%d complete) for %d events; want one complete key per event", keys, complete, events)
	}
	if st.Replayed < events {
		t.Errorf("%d replayed answers; every event was delivered again after it succeeded, so want at least %d", st.Replayed, events)
	}

	// Refused deliveries: each kind several times, on the receiver that is up now.
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
