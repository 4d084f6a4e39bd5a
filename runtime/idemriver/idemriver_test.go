package idemriver_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemriver"
	"github.com/idemgen/idemgen/runtime/idemtest"
)

type sendArgs struct {
	Item string `json:"item"`
}

func (sendArgs) Kind() string { return "send" }

// sendWorker writes one row per effect it commits, and fails its first failFirst runs after
// its write, so the rollback of a failed run is visible.
type sendWorker struct {
	river.WorkerDefaults[sendArgs]
	sch       *idemtest.Schema
	failFirst int32
	runs      atomic.Int32
	keys      chan string
}

func (w *sendWorker) Work(ctx context.Context, job *river.Job[sendArgs]) error {
	k, err := idemriver.DerivedKey(job.JobRow, "mailer")
	if err != nil {
		return err
	}
	w.keys <- k
	run := w.runs.Add(1)
	return idemriver.CompleteTx(ctx, w.sch.Pool, job, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO sent (item, provider_key) VALUES ($1, $2)`, job.Args.Item, k); err != nil {
			return err
		}
		if run <= w.failFirst {
			return errors.New("mailer answered 503")
		}
		return nil
	})
}

type env struct {
	sch    *idemtest.Schema
	store  *idem.Store
	client *river.Client[pgx.Tx]
	worker *sendWorker
}

func newEnv(t *testing.T, failFirst int32) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sch := idemtest.TestSchema(t, nil)
	m, err := rivermigrate.New(riverpgxv5.New(sch.Pool), &rivermigrate.Config{Schema: sch.Name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("migrate River's tables: %v", err)
	}
	if _, err := sch.Pool.Exec(ctx, `CREATE TABLE sent (item text NOT NULL, provider_key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store, err := idem.NewStore(sch.Pool, sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	w := &sendWorker{sch: sch, failFirst: failFirst, keys: make(chan string, 16)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(sch.Pool), &river.Config{
		Schema:            sch.Name,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		Workers:           workers,
		FetchPollInterval: 20 * time.Millisecond,
		FetchCooldown:     10 * time.Millisecond,
		RetryPolicy:       retryAtOnce{},
		Logger:            slog.New(slog.DiscardHandler),
		TestOnly:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{sch: sch, store: store, client: client, worker: w}
}

// retryAtOnce retries a failed job right away, so a test sees its second run in milliseconds.
type retryAtOnce struct{}

func (retryAtOnce) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

func (e *env) count(t *testing.T, sql string) int {
	t.Helper()
	var n int
	if err := e.sch.Pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// enqueue is an idempotent handler that inserts its job and fails when told to.
func (e *env) enqueue(t *testing.T, key string, fail bool, derived *string) (*idem.DoResult, error) {
	t.Helper()
	p := &idem.DoParams{Tenant: "acme", Scope: "send", Key: key, Operation: "send", Fingerprint: "fp"}
	return e.store.Do(context.Background(), p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if _, err := idemriver.InsertTx(ctx, e.client, tx, sendArgs{Item: key}, &river.InsertOpts{Metadata: []byte(`{"trace":"t1"}`)}); err != nil {
			return nil, err
		}
		if derived != nil {
			k, err := idem.DerivedKey(ctx, "mailer")
			if err != nil {
				return nil, err
			}
			*derived = k
		}
		if fail {
			return nil, errors.New("handler failed after the insert")
		}
		return &idem.Outcome{Status: 202}, nil
	})
}

// TestJobExistsIffTheOutcomeDoes: the job commits with the key's outcome, a failed handler
// leaves none, and a replay inserts none.
func TestJobExistsIffTheOutcomeDoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	if _, err := e.enqueue(t, "k1", true, nil); err == nil {
		t.Fatal("failing handler: no error")
	}
	if n := e.count(t, `SELECT count(*) FROM river_job`); n != 0 {
		t.Fatalf("%d jobs after a failed handler; want 0", n)
	}
	var derived string
	if r, err := e.enqueue(t, "k1", false, &derived); err != nil || r.Replayed {
		t.Fatalf("enqueue = %+v, %v", r, err)
	}
	if r, err := e.enqueue(t, "k1", false, nil); err != nil || !r.Replayed {
		t.Fatalf("retry = %+v, %v; want a replay", r, err)
	}
	if n := e.count(t, `SELECT count(*) FROM river_job`); n != 1 {
		t.Fatalf("%d jobs for one key; want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM river_job WHERE metadata->>'trace' = 't1'`); n != 1 {
		t.Fatal("InsertTx dropped the caller's metadata")
	}
	_, err := idemriver.InsertTx(context.Background(), e.client, nil, sendArgs{}, nil)
	if !errors.Is(err, idem.ErrNoClaim) {
		t.Fatalf("InsertTx outside a claim = %v; want ErrNoClaim", err)
	}

	// The worker fails its first run after its write: the write is rolled back with the
	// completion, River runs the job again, and both runs derive the handler's key.
	e.worker.failFirst = 1
	e.start(t)
	for i := range 2 {
		select {
		case k := <-e.worker.keys:
			if k != derived {
				t.Fatalf("run %d derived %s; the handler derived %s", i+1, k, derived)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d of the job did not start within 10s", i+1)
		}
	}
	e.waitCompleted(t, 1)
	if n := e.count(t, `SELECT count(*) FROM sent`); n != 1 {
		t.Fatalf("%d rows written by a job that ran twice; want 1 (the failed run's rolled back)", n)
	}
}

func (e *env) start(t *testing.T) {
	t.Helper()
	// Start's context is the client's lifetime, not a deadline for starting: Stop ends it.
	if err := e.client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.client.StopAndCancel(ctx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})
}

func (e *env) waitCompleted(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.count(t, `SELECT count(*) FROM river_job WHERE state = 'completed'`) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs did not complete within 10s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orderJob is keyed by its order: two jobs for one order do it once.
type orderJob struct {
	Order string `json:"order"`
}

func (orderJob) Kind() string             { return "order_job" }
func (a orderJob) IdempotencyKey() string { return a.Order }

// orderJobWorker holds its first run until released, so a second job for the same order runs
// while the first still does.
type orderJobWorker struct {
	river.WorkerDefaults[orderJob]
	consumer *idemconsume.Consumer
	pool     *pgxpool.Pool
	running  chan struct{}
	release  chan struct{}
	results  chan idemconsume.Result
	runs     atomic.Int32
}

func (w *orderJobWorker) Work(ctx context.Context, job *river.Job[orderJob]) error {
	r := idemriver.Process(ctx, w.consumer, job, func(ctx context.Context, tx pgx.Tx) error {
		if w.runs.Add(1) == 1 {
			close(w.running)
			<-w.release
		}
		_, err := tx.Exec(ctx, `INSERT INTO sent (item, provider_key) VALUES ($1, '')`, job.Args.Order)
		return err
	})
	w.results <- r
	return idemriver.Settle(r)
}

// TestSameKeyWhileRunning: a job for an order runs while another job for it still runs: it is
// snoozed, not run, and completes as a duplicate once the first committed.
func TestSameKeyWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0)
	w := &orderJobWorker{consumer: idemconsume.New(e.store, &idemconsume.Options{Lease: 2 * time.Second}), pool: e.sch.Pool,
		running: make(chan struct{}), release: make(chan struct{}), results: make(chan idemconsume.Result, 16)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(e.sch.Pool), &river.Config{
		Schema: e.sch.Name, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}, Workers: workers,
		FetchPollInterval: 20 * time.Millisecond, FetchCooldown: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), TestOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.Insert(ctx, orderJob{Order: "o-1"}, nil); err != nil {
		t.Fatal(err)
	}
	e.client = client
	e.start(t)
	select {
	case <-w.running:
	case <-time.After(10 * time.Second):
		t.Fatal("the first job did not start within 10s")
	}
	if _, err := client.Insert(ctx, orderJob{Order: "o-1"}, nil); err != nil {
		t.Fatal(err)
	}
	next := func(what string) idemconsume.Result {
		t.Helper()
		select {
		case r := <-w.results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no result within 10s", what)
		}
		return idemconsume.Result{}
	}
	if r := next("second job"); r.Action != idemconsume.Redeliver || r.Reason != idemconsume.ReasonInProgress {
		t.Fatalf("second job while the first runs: %+v; want redeliver (snoozed), in_progress", r)
	}
	close(w.release)
	// The first completes; the snoozed second comes back and finds the order done (it may be
	// snoozed again meanwhile).
	ran, dup := 0, 0
	for ran+dup < 2 {
		r := next("after the release")
		switch {
		case r.Ran:
			ran++
		case r.Duplicate:
			dup++
		case r.Reason != idemconsume.ReasonInProgress:
			t.Fatalf("unexpected result %+v", r)
		}
	}
	e.waitCompleted(t, 2)
	if ran != 1 || dup != 1 || e.count(t, `SELECT count(*) FROM sent`) != 1 || w.runs.Load() != 1 {
		t.Fatalf("ran %d, duplicates %d, %d rows, handler runs %d; want 1, 1, 1, 1", ran, dup, e.count(t, `SELECT count(*) FROM sent`), w.runs.Load())
	}
}

// TestSettle: what a worker returns to River for each result.
func TestSettle(t *testing.T) {
	t.Parallel()
	if err := idemriver.Settle(idemconsume.Result{Action: idemconsume.Ack, Duplicate: true}); err != nil {
		t.Errorf("ack: %v; want nil", err)
	}
	var cancel *river.JobCancelError
	err := idemriver.Settle(idemconsume.Result{Action: idemconsume.DeadLetter, Reason: idemconsume.ReasonKeyReused, Err: idem.ErrKeyReused})
	if !errors.As(err, &cancel) || !strings.Contains(err.Error(), "key_reused: ") || !errors.Is(err, idem.ErrKeyReused) {
		t.Errorf("dead letter: %v; want river.JobCancel with the reason and the cause", err)
	}
	var snooze *river.JobSnoozeError
	err = idemriver.Settle(idemconsume.Result{Action: idemconsume.Redeliver, Reason: idemconsume.ReasonInProgress, RetryAfter: 3 * time.Second})
	if !errors.As(err, &snooze) || snooze.Duration != 3*time.Second {
		t.Errorf("in progress: %v; want river.JobSnooze(3s)", err)
	}
	failed := errors.New("mailer answered 503")
	if err := idemriver.Settle(idemconsume.Result{Action: idemconsume.Redeliver, Reason: idemconsume.ReasonHandlerFailed, Err: failed}); err != failed {
		t.Errorf("handler failed: %v; want the handler's error, for River's retry policy", err)
	}
}
