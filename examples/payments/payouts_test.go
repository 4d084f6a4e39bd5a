package payments

// Payouts end to end: POST /v1/payouts (202 + Location) → a River job → the fake bank, a real HTTP
// server with its own table and Idempotency-Key check, on a real PostgreSQL schema of each
// test's own. The fault tests count, per request: bank charges, payout rows, jobs and answers.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/runtime/idemtest"
)

// payoutEnv is one schema with the fake bank served on it; the API server and the worker are
// started (and restarted, and killed) by the test.
type payoutEnv struct {
	t       *testing.T
	schema  *idemtest.Schema
	log     *slog.Logger
	bank    *bank
	bankMu  sync.Mutex // guards bank.afterCharge's state in the tests that set it
	bankAt  string
	api     *env   // the current API server
	stopAPI func() // closes it and its store, as a process that exits does
	// done ends when the test does (before the bank's server closes): the bank's test hooks
	// wait on it, so none outlives the test.
	done context.Context
}

func newPayoutEnv(t *testing.T) *payoutEnv {
	t.Helper()
	schema := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 24})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(tWriter{t}, nil))
	}
	if err := Migrate(ctx, schema.Pool); err != nil {
		t.Fatal(err)
	}
	if err := migratePayouts(ctx, schema.Pool, schema.Name, log); err != nil {
		t.Fatal(err)
	}
	done, end := context.WithCancel(context.Background())
	e := &payoutEnv{t: t, schema: schema, log: log, bank: &bank{db: schema.Pool}, done: done}
	srv := httptest.NewServer(e.bank)
	t.Cleanup(srv.Close)
	t.Cleanup(end) // before srv.Close (cleanups run last first): no hook keeps a handler open
	e.bankAt = srv.URL
	e.api, e.stopAPI = e.startAPI()
	return e
}

// holdFirstCharges makes the bank hold the answer to each payout's first charge until its
// caller gives up (the worker dies, or its bank timeout ends) or the test ends, and reports the
// charge's key on the returned channel. There is one first charge per payout, n in all, as long
// as every run of a payout's job sends the bank the same key: a first charge beyond n means a
// job's key changed between runs, which the test is told at once (not held, not reported).
func (e *payoutEnv) holdFirstCharges(n int) <-chan string {
	charged := make(chan string, n)
	e.bank.afterCharge = func(ctx context.Context, key string, calls int) {
		if calls != 1 {
			return
		}
		select {
		case charged <- key:
		default:
			e.t.Errorf("the bank was charged for the first time under more than %d keys (%s is one more): "+
				"a payout job's bank key is not the same on every run", n, key)
			return
		}
		select { // the answer never leaves while the caller waits
		case <-ctx.Done():
		case <-e.done.Done():
		}
	}
	return charged
}

// startAPI serves the example's handler on a new loopback server; stop closes it and its store,
// as a process that exits does.
func (e *payoutEnv) startAPI() (*env, func()) {
	e.t.Helper()
	h, store, err := newService(e.schema.Pool, e.schema.Config(), e.log)
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	client := srv.Client()
	client.Timeout = 15 * time.Second
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	var once sync.Once
	stop := func() { once.Do(func() { srv.Close(); store.Close() }) }
	e.t.Cleanup(stop)
	return &env{t: e.t, url: srv.URL, client: client, schema: e.schema}, stop
}

// worker is a running payout worker; kill stops it the hard way (River's StopAndCancel: every
// job's context is cancelled at once, mid-run).
type worker struct {
	t      *testing.T
	client *river.Client[pgx.Tx]
}

// retryAtOnce makes River run a failed job again right away instead of after its backoff.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

func (e *payoutEnv) startWorker(bankTimeout time.Duration) *worker {
	e.t.Helper()
	c, err := newPayoutWorker(e.schema.Pool, e.schema.Name, e.log, workerOptions{
		BankURL: e.bankAt, BankTimeout: bankTimeout,
		Retry: retryAtOnce{}, FetchPollInterval: 20 * time.Millisecond, MaxWorkers: 16, TestOnly: true,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	w := &worker{t: e.t, client: c}
	e.t.Cleanup(w.kill)
	return w
}

func (w *worker) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.client.StopAndCancel(ctx); err != nil {
		w.t.Errorf("stop the payout worker within 10s: %v", err)
	}
}

// payoutAnswer is what one POST /v1/payouts got.
type payoutAnswer struct {
	status   int
	location string
	body     string
	replayed bool
	// transient counts the 503 and 409 in-progress answers post retried before this one.
	transient int
	err       error
}

// post sends one payout request and, like a client told Retry-After, sends it again after a 503
// (store unavailable: nothing ran) or a 409 in-progress (the first still runs past the 5s wait),
// which a loaded machine can produce; the final answer is returned, with how many came before.
func (e *payoutEnv) post(tenant, key, account string) payoutAnswer {
	body := fmt.Sprintf(`{"amount_minor": 5000, "currency": "RUB", "account": %q}`, account)
	deadline := time.Now().Add(30 * time.Second)
	transient := 0
	for {
		req, err := http.NewRequest(http.MethodPost, e.api.url+"/v1/payouts", bytes.NewBufferString(body))
		if err != nil {
			return payoutAnswer{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant-ID", tenant)
		req.Header.Set("Idempotency-Key", key)
		r, err := e.api.do(req)
		if err != nil {
			return payoutAnswer{err: err}
		}
		a := payoutAnswer{status: r.status, location: r.header.Get("Location"), body: string(r.body), replayed: r.replayed(), transient: transient}
		if (r.status != http.StatusServiceUnavailable && r.status != http.StatusConflict) || time.Now().After(deadline) {
			return a
		}
		transient++
		time.Sleep(50 * time.Millisecond)
	}
}

// fire sends every key dups times, all at once, and returns the answers per key.
func (e *payoutEnv) fire(tenant string, keys []string, dups int) map[string][]payoutAnswer {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string][]payoutAnswer{}
	)
	for _, k := range keys {
		for range dups {
			wg.Go(func() {
				a := e.post(tenant, k, "acct-"+k)
				mu.Lock()
				out[k] = append(out[k], a)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return out
}

func (e *payoutEnv) count(sql string, args ...any) int {
	e.t.Helper()
	return e.api.count(sql, args...)
}

// waitFinished waits until n payouts are no longer pending and their n jobs completed.
func (e *payoutEnv) waitFinished(n int, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		done := e.count(`SELECT count(*) FROM payouts WHERE status <> 'pending'`)
		jobs := e.count(`SELECT count(*) FROM river_job WHERE state = 'completed'`)
		if done == n && jobs == n {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after %s: %d of %d payouts finished and %d of %d jobs completed", within, done, n, jobs, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// payoutCounts is what the fault tests measure, per request and in all.
type payoutCounts struct {
	requests, answers, replays int
	transient                  int
	bankCharges, bankCalls     int
	payouts, jobs, completed   int
	jobAttempts                int
}

// check wants every key's answers to be one 202 with one Location, and, per key, exactly one
// bank charge, one succeeded payout with that charge, and one completed job; it logs the counts.
func (e *payoutEnv) check(tenant string, answers map[string][]payoutAnswer) payoutCounts {
	e.t.Helper()
	var c payoutCounts
	for key, as := range answers {
		c.requests++
		first := as[0]
		for _, a := range as {
			c.answers++
			c.transient += a.transient
			if a.replayed {
				c.replays++
			}
			if a.err != nil || a.status != http.StatusAccepted {
				e.t.Errorf("key %s: an answer was %d %s (%v); want 202", key, a.status, a.body, a.err)
				continue
			}
			if a.location != first.location || a.body != first.body {
				e.t.Errorf("key %s: answers differ: %s %s and %s %s; want every retry to get the same 202", key, first.location, first.body, a.location, a.body)
			}
		}
		id := derivedID("po_", tenant, key)
		if first.location != "/v1/payouts/"+id {
			e.t.Errorf("key %s: Location %q; want /v1/payouts/%s", key, first.location, id)
		}
		if n := e.count(`SELECT count(*) FROM bank_charges WHERE account = $1`, "acct-"+key); n != 1 {
			e.t.Errorf("key %s: %d bank charges; want 1", key, n)
		}
		if n := e.count(`SELECT count(*) FROM payouts p JOIN bank_charges b ON b.charge_id::text = p.bank_charge_id
			WHERE p.tenant_id = $1 AND p.payout_id = $2 AND p.status = 'succeeded'`, tenant, id); n != 1 {
			e.t.Errorf("key %s: %d succeeded payouts carrying the bank's charge; want 1", key, n)
		}
		if n := e.count(`SELECT count(*) FROM river_job WHERE args->>'payout_id' = $1 AND state = 'completed'`, id); n != 1 {
			e.t.Errorf("key %s: %d completed jobs; want 1", key, n)
		}
		// The status resource the 202 points at reports the result.
		var p struct {
			Status       string `json:"status"`
			BankChargeID string `json:"bank_charge_id"`
		}
		r := e.api.send(request{method: http.MethodGet, path: first.location, tenant: tenant})
		if err := json.Unmarshal(r.body, &p); err != nil || r.status != http.StatusOK || p.Status != "succeeded" ||
			e.count(`SELECT count(*) FROM bank_charges WHERE charge_id::text = $1`, p.BankChargeID) != 1 {
			e.t.Errorf("GET %s = %d %s; want succeeded with the bank's charge", first.location, r.status, r.body)
		}
	}
	c.bankCharges = e.count(`SELECT count(*) FROM bank_charges`)
	c.bankCalls = e.count(`SELECT coalesce(sum(calls), 0)::int FROM bank_charges`)
	c.payouts = e.count(`SELECT count(*) FROM payouts`)
	c.jobs = e.count(`SELECT count(*) FROM river_job`)
	c.completed = e.count(`SELECT count(*) FROM river_job WHERE state = 'completed'`)
	c.jobAttempts = e.count(`SELECT coalesce(sum(attempt), 0)::int FROM river_job`)
	if c.bankCharges != c.requests || c.payouts != c.requests || c.jobs != c.requests || c.completed != c.requests {
		e.t.Errorf("%+v; want one charge, one payout and one completed job per request", c)
	}
	e.t.Logf("requests %d, answers %d (replayed %d; %d transient 503/409 retried before them), bank calls %d, bank charges %d, payouts %d, jobs %d (completed %d, runs %d)",
		c.requests, c.answers, c.replays, c.transient, c.bankCalls, c.bankCharges, c.payouts, c.jobs, c.completed, c.jobAttempts)
	return c
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

const (
	faultRequests = 8 // distinct payout requests per fault test
	faultDups     = 4 // copies of each sent at once
)

// merge appends later answers (retries) to earlier ones, key by key.
func merge(a, b map[string][]payoutAnswer) map[string][]payoutAnswer {
	for k, v := range b {
		a[k] = append(a[k], v...)
	}
	return a
}

// TestPayoutAnswers202AndTheStatusTurnsSucceeded: the first answer, its replay before and
// after the job, and the status resource going from pending to succeeded.
func TestPayoutAnswers202AndTheStatusTurnsSucceeded(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	first := e.post("acme", "po-1", "acct-po-1")
	if first.status != http.StatusAccepted || first.replayed || first.location == "" {
		t.Fatalf("POST /v1/payouts = %+v; want 202 with a Location", first)
	}
	r := e.api.send(request{method: http.MethodGet, path: first.location, tenant: "acme"})
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"status":"pending"`)) {
		t.Fatalf("GET %s before the worker = %d %s; want pending", first.location, r.status, r.body)
	}
	before := e.post("acme", "po-1", "acct-po-1")
	e.startWorker(5 * time.Second)
	e.waitFinished(1, 10*time.Second)
	after := e.post("acme", "po-1", "acct-po-1")
	for _, a := range []payoutAnswer{before, after} {
		if a.status != http.StatusAccepted || !a.replayed || a.location != first.location || a.body != first.body {
			t.Fatalf("replay = %+v; want the first 202 (%s) replayed", a, first.location)
		}
	}
	r = e.api.send(request{method: http.MethodGet, path: first.location, tenant: "acme"})
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"status":"succeeded"`)) || !bytes.Contains(r.body, []byte(`"bank_charge_id"`)) {
		t.Fatalf("GET %s after the worker = %d %s; want succeeded with the bank's charge", first.location, r.status, r.body)
	}
	// A declined payout fails, once, with the bank's reason.
	d := e.post("acme", "po-2", declinedPrefix+"1")
	e.waitFinished(2, 10*time.Second)
	r = e.api.send(request{method: http.MethodGet, path: d.location, tenant: "acme"})
	if !bytes.Contains(r.body, []byte(`"status":"failed"`)) || !bytes.Contains(r.body, []byte(`closed`)) {
		t.Fatalf("GET %s of a declined payout = %d %s; want failed with the bank's reason", d.location, r.status, r.body)
	}
	if n := e.count(`SELECT count(*) FROM river_job WHERE state = 'completed'`); n != 2 {
		t.Fatalf("%d completed jobs; want 2", n)
	}
	// Another tenant does not see it.
	if r := e.api.send(request{method: http.MethodGet, path: first.location, tenant: "globex"}); r.status != http.StatusNotFound {
		t.Fatalf("GET %s as another tenant = %d; want 404", first.location, r.status)
	}
}

// TestFaultPayoutWorkerKilledAfterTheCharge: the bank charges, and the worker is killed before
// the bank's answer reaches it, so the job never completes; the next worker runs it again.
func TestFaultPayoutWorkerKilledAfterTheCharge(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	charged := e.holdFirstCharges(faultRequests) // the answer never leaves: the worker dies first
	answers := e.fire("acme", keys("kill", faultRequests), faultDups)
	w := e.startWorker(5 * time.Second)
	for i := range faultRequests {
		select {
		case <-charged:
		case <-time.After(30 * time.Second):
			t.Fatalf("the bank charged %d of %d payouts within 30s", i, faultRequests)
		}
	}
	w.kill()
	if n := e.count(`SELECT count(*) FROM river_job WHERE state = 'completed'`); n != 0 {
		t.Fatalf("%d jobs completed although every worker died before the bank answered", n)
	}
	e.startWorker(5 * time.Second)
	e.waitFinished(faultRequests, 30*time.Second)
	c := e.check("acme", merge(answers, e.fire("acme", keys("kill", faultRequests), 1)))
	if c.bankCalls < 2*faultRequests {
		t.Fatalf("%d bank calls; want every payout's job to have called twice (the fault did not happen)", c.bankCalls)
	}
}

// TestFaultPayoutBankTimesOutAfterTheCharge: the bank charges and answers too late for the
// worker's timeout; the job runs again and the bank answers with the first charge.
func TestFaultPayoutBankTimesOutAfterTheCharge(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	e.bank.afterCharge = func(ctx context.Context, key string, calls int) {
		if calls == 1 {
			select {
			case <-ctx.Done():
			case <-e.done.Done():
			case <-time.After(10 * time.Second):
			}
		}
	}
	answers := e.fire("acme", keys("slow", faultRequests), faultDups)
	e.startWorker(time.Second) // the stalled first answers time out; the replays come in time
	e.waitFinished(faultRequests, 30*time.Second)
	c := e.check("acme", merge(answers, e.fire("acme", keys("slow", faultRequests), 1)))
	if c.bankCalls < 2*faultRequests || c.jobAttempts < 2*faultRequests {
		t.Fatalf("%d bank calls, %d job runs; want at least two of each per payout (the timeout did not happen)", c.bankCalls, c.jobAttempts)
	}
}

// TestFaultPayoutAPIRestartsBeforeTheJobStarts: the API answers 202 and goes away before any
// worker ran; after a restart, retries replay the same 202, and the jobs run once.
func TestFaultPayoutAPIRestartsBeforeTheJobStarts(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	ks := keys("restart", faultRequests)
	answers := e.fire("acme", ks, faultDups)
	e.stopAPI()
	if n := e.count(`SELECT count(*) FROM river_job WHERE state = 'available'`); n != faultRequests {
		t.Fatalf("%d jobs waiting after the API stopped; want %d", n, faultRequests)
	}
	e.api, e.stopAPI = e.startAPI()
	answers = merge(answers, e.fire("acme", ks, faultDups))
	e.startWorker(5 * time.Second)
	e.waitFinished(faultRequests, 30*time.Second)
	e.check("acme", merge(answers, e.fire("acme", ks, 1)))
}

// TestPayoutStormOneJobPerKey: many copies of a few requests at the same instant; duplicates
// wait for the first (wait: 5s) and replay its 202, and each key has one job.
func TestPayoutStormOneJobPerKey(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	answers := e.fire("acme", keys("storm", 3), 30)
	if n := e.count(`SELECT count(*) FROM river_job`); n != 3 {
		t.Fatalf("%d jobs for 3 keys under a storm of duplicates; want 3", n)
	}
	e.startWorker(5 * time.Second)
	e.waitFinished(3, 30*time.Second)
	c := e.check("acme", answers)
	if c.replays != c.answers-c.requests {
		t.Fatalf("%d replays of %d answers to %d requests; want all but the first of each replayed", c.replays, c.answers, c.requests)
	}
}

// The killed-worker test runs the payout worker in a child process (this test binary, through
// TestMain) and kills it with SIGKILL while the bank holds its charges' answers.
const (
	workerChildURL    = "IDEMGEN_PAYOUT_WORKER_URL"
	workerChildSchema = "IDEMGEN_PAYOUT_WORKER_SCHEMA"
	workerChildBank   = "IDEMGEN_PAYOUT_WORKER_BANK"
)

// workerChild works payout jobs like the example server does, until it is killed. It is no
// leader, so its death leaves no leadership for the next worker to wait out. It ends itself
// after a minute, should the parent die first.
func workerChild() int {
	time.AfterFunc(time.Minute, func() { os.Exit(3) })
	cfg, err := pgxpool.ParseConfig(os.Getenv(workerChildURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	schema := os.Getenv(workerChildSchema)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	c, err := newPayoutWorker(pool, schema, slog.New(slog.NewTextHandler(io.Discard, nil)), workerOptions{
		BankURL: os.Getenv(workerChildBank), FetchPollInterval: 20 * time.Millisecond, MaxWorkers: 16, TestOnly: true, NoLeader: true,
	})
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker child:", err)
		return 2
	}
	fmt.Println("working")
	select {}
}

// TestFaultPayoutWorkerProcessKilledAfterTheCharge: the bank charges and the worker process dies
// (SIGKILL) before the bank's answer reaches it. Its jobs stay running, never completed; River
// rescues them as stuck, and the next worker pays each with the same key: the bank answers with
// the first charge.
func TestFaultPayoutWorkerProcessKilledAfterTheCharge(t *testing.T) {
	t.Parallel()
	e := newPayoutEnv(t)
	charged := e.holdFirstCharges(faultRequests) // the worker dies before this answer leaves
	ks := keys("sigkill", faultRequests)
	answers := e.fire("acme", ks, faultDups)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), workerChildURL+"="+e.schema.URL, workerChildSchema+"="+e.schema.Name, workerChildBank+"="+e.bankAt)
	child.Stderr = tWriter{t}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	for i := range faultRequests {
		select {
		case <-charged:
		case <-time.After(30 * time.Second):
			t.Fatalf("the bank charged %d of %d payouts within 30s", i, faultRequests)
		}
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL: no cleanup of any kind
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true
	if n := e.count(`SELECT count(*) FROM river_job WHERE state = 'running'`); n != faultRequests {
		t.Fatalf("%d jobs running after the worker died mid-job; want %d", n, faultRequests)
	}
	// River rescues a job running longer than RescueStuckJobsAfter (2 minutes in the example,
	// 1s here), which its leader checks on taking office.
	rescueAfter := time.Second
	time.Sleep(rescueAfter)
	c, err := newPayoutWorker(e.schema.Pool, e.schema.Name, e.log, workerOptions{
		BankURL: e.bankAt, Retry: retryAtOnce{}, FetchPollInterval: 20 * time.Millisecond, MaxWorkers: 16, TestOnly: true,
		RescueAfter: rescueAfter, JobTimeout: rescueAfter,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, client: c}
	t.Cleanup(w.kill)
	e.waitFinished(faultRequests, 30*time.Second)
	counts := e.check("acme", merge(answers, e.fire("acme", ks, 1)))
	if counts.bankCalls < 2*faultRequests || counts.jobAttempts < 2*faultRequests {
		t.Fatalf("%d bank calls, %d job runs; want two of each per payout (the kill did not happen)", counts.bankCalls, counts.jobAttempts)
	}
}
