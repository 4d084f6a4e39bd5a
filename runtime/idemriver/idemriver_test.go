package idemriver_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/runtime/idem"
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
