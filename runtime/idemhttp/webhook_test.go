package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemwebhook"
)

const hookSecret = "whsec_c2VjcmV0LWZvci10aGUtd2ViaG9vay10ZXN0cw=="

// TestWebhookReceiver: a receiver verifies each delivery before it claims the delivery's id. A
// redelivery of a delivery that succeeded is answered with the stored 2xx and runs nothing; ten
// concurrent copies of one delivery run it once and are all answered 2xx (they wait for the
// first); a failed handler answers 5xx and keeps nothing, so the redelivery runs; forged,
// expired, unsigned and id-less deliveries are refused in the API's error format, with no row
// and no key.
func TestWebhookReceiver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	p := &idemhttp.Policy{
		Operation: "bankSettlement", Route: "POST /webhooks/bank",
		Key:  idemhttp.KeyRule{Header: "webhook-id", Required: true},
		Body: true, NoFingerprint: true,
		Lease: 10 * time.Second, Wait: 10 * time.Second,
	}
	receiver := &idemwebhook.Receiver{
		Verifier: idemwebhook.Verifier{Scheme: idemwebhook.StandardWebhooks, Secrets: idemwebhook.Static(hookSecret)},
		Key:      idemwebhook.KeySource{Header: "webhook-id"},
	}
	gate := make(chan struct{})
	var failOnce sync.Map
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/bank", func(w http.ResponseWriter, r *http.Request) {
		res, err := idemhttp.Handle(r.Context(), e.Store, p, &idemhttp.Op[answer]{
			Key:     "never read: Receive finds the key",
			Scope:   []idemhttp.Part{{Name: "operation"}},
			Receive: receiver.Receive,
			Run: func(ctx context.Context, tx pgx.Tx) (answer, error) {
				id := r.Header.Get("webhook-id")
				if strings.HasPrefix(id, "slow") {
					<-gate
				}
				if _, loaded := failOnce.LoadOrStore(id, true); !loaded && strings.HasPrefix(id, "fail") {
					return answer{}, errors.New("the ledger is down")
				}
				_, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ($1, 1)", id)
				return answer{200}, err
			},
			Record: func(a answer) (*idem.Outcome, error) {
				return &idem.Outcome{Status: a.status, Body: []byte(`{"received":true}`)}, nil
			},
		})
		if err != nil {
			idemhttp.ResponseErrorHandler(e.Store)(w, r, err)
			return
		}
		_ = res.WriteTo(w)
	})
	srv := httptest.NewServer(idemhttp.CaptureWith(e.Store, []*idemhttp.Policy{p}, idemhttp.CaptureOptions{
		Renderer: apiRenderer("application/vnd.api+json"),
	})(mux))
	defer srv.Close()

	deliver := func(id string, ts time.Time, body string, sign func(h http.Header)) (int, apiError) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/bank", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if id != "" {
			req.Header.Set("webhook-id", id)
		}
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
		sig, err := idemwebhook.SignStandard(id, ts, []byte(body), hookSecret)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("webhook-signature", sig)
		if sign != nil {
			sign(req.Header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("deliver %s: %v", id, err)
			return 0, apiError{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var ae apiError
		_ = json.Unmarshal(b, &ae)
		return resp.StatusCode, ae
	}
	rows := func(id string) int { return e.Count("SELECT count(*) FROM payments WHERE key = $1", id) }
	body := `{"type":"charge.settled"}`

	if st, _ := deliver("evt_1", time.Now(), body, nil); st != 200 {
		t.Fatalf("first delivery: %d, want 200", st)
	}
	if st, _ := deliver("evt_1", time.Now(), body, nil); st != 200 || rows("evt_1") != 1 {
		t.Fatalf("redelivery: %d with %d rows, want the stored 200 and 1 row", st, rows("evt_1"))
	}

	if st, ae := deliver("fail_1", time.Now(), body, nil); st != 500 || rows("fail_1") != 0 {
		t.Fatalf("failing handler: %d %+v with %d rows, want 500 and no row", st, ae, rows("fail_1"))
	}
	if st, _ := deliver("fail_1", time.Now(), body, nil); st != 200 || rows("fail_1") != 1 {
		t.Fatalf("redelivery after a failure: %d with %d rows, want 200 and 1 row", st, rows("fail_1"))
	}

	// Concurrent copies: all wait for the first one, which the gate holds until they are sent.
	const copies = 10
	statuses := make(chan int, copies)
	var wg sync.WaitGroup
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _ := deliver("slow_1", time.Now(), body, nil)
			statuses <- st
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.Count("SELECT count(*) FROM "+e.Store.Table()+" WHERE key = 'slow_1'") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no copy of slow_1 claimed its key within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the other copies reach their wait
	close(gate)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Errorf("a concurrent copy was answered %d, want 200 (the first one's answer)", st)
		}
	}
	if n := rows("slow_1"); n != 1 {
		t.Fatalf("%d concurrent copies ran the handler %d times, want once", copies, n)
	}

	keysBefore := e.Keys()
	refusals := []struct {
		name   string
		id     string
		ts     time.Time
		mutate func(http.Header)
		status int
		code   string
	}{
		{"forged", "evt_forged", time.Now(), func(h http.Header) {
			sig, _ := idemwebhook.SignStandard("evt_forged", time.Now(), []byte(body), "whsec_Z3Vlc3NlZC1zZWNyZXQ=")
			h.Set("webhook-signature", sig)
		}, 401, idemhttp.CodeSignatureInvalid},
		{"expired", "evt_expired", time.Now().Add(-time.Hour), nil, 401, idemhttp.CodeSignatureInvalid},
		{"unsigned", "evt_unsigned", time.Now(), func(h http.Header) { h.Del("webhook-signature") }, 401, idemhttp.CodeSignatureInvalid},
		{"body changed after signing", "evt_changed", time.Now(), func(h http.Header) {
			sig, _ := idemwebhook.SignStandard("evt_changed", time.Now(), []byte(`{"type":"other"}`), hookSecret)
			h.Set("webhook-signature", sig)
		}, 401, idemhttp.CodeSignatureInvalid},
	}
	for _, r := range refusals {
		st, ae := deliver(r.id, r.ts, body, r.mutate)
		if st != r.status || ae.Code != "API."+r.code {
			t.Errorf("%s delivery: %d %+v, want %d API.%s", r.name, st, ae, r.status, r.code)
		}
		if n := rows(r.id); n != 0 {
			t.Errorf("%s delivery left %d rows, want 0", r.name, n)
		}
	}
	if n := e.Keys(); n != keysBefore {
		t.Errorf("refused deliveries bound %d keys, want 0", n-keysBefore)
	}
	t.Logf("refused %d deliveries, %d keys bound by them", len(refusals), e.Keys()-keysBefore)
}
