package idemriver_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemconsume"
	"github.com/idemgen/idemgen/runtime/idemriver"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/proctest"
)

// The storm's workers are this test binary run again as separate processes, so that the test
// can kill one by its PID mid-job and after its commit, as a crash would.
const (
	childEnv    = "IDEMRIVER_STORM_WORKER"
	childDB     = "IDEMRIVER_STORM_DB"
	childSchema = "IDEMRIVER_STORM_SCHEMA"
	stormLease  = 2 * time.Second
	// stormRescueAfter is how long a job may run before River's rescuer makes it available again:
	// short, so that the jobs of killed workers come back within the test. River's rescuer looks
	// every 30 seconds, which bounds how long they wait.
	stormRescueAfter = 2 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(stormWorker())
	}
	os.Exit(m.Run())
}

// orderArgs is a storm job: Key is the order it stands for (two jobs for one order do it once),
// Kill says where the worker running it is killed (once per job key).
type orderArgs struct {
	Key  string `json:"key"`
	N    int    `json:"n"`
	Kill string `json:"kill,omitempty"` // "mid" (in the handler, before the commit) or "committed" (after the commit, before Work returns)
	Note string `json:"note,omitempty"`
}

func (orderArgs) Kind() string                 { return "order" }
func (a orderArgs) IdempotencyKey() string     { return a.Key }
func (orderArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 25} }

// orderWorker handles storm jobs through idemriver, reporting each step on stdout.
type orderWorker struct {
	river.WorkerDefaults[orderArgs]
	pool     *pgxpool.Pool
	consumer *idemconsume.Consumer
	say      func(format string, args ...any)
}

func (w *orderWorker) Work(ctx context.Context, job *river.Job[orderArgs]) error {
	if w.say == nil { // the test process's own client never runs jobs (its queue has none)
		return errors.New("not a storm worker")
	}
	key := job.Args.Key
	w.say("got %s %d %d", key, job.ID, job.Attempt)
	killOnce := func(point string) bool {
		tag, err := w.pool.Exec(ctx, `INSERT INTO kills (msg_id, point) VALUES ($1, $2) ON CONFLICT DO NOTHING`, key, point)
		return err == nil && tag.RowsAffected() == 1
	}
	r := idemriver.Process(ctx, w.consumer, job, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (msg_id, payload, pid) VALUES ($1, $2, $3)`, key, string(job.EncodedArgs), os.Getpid()); err != nil {
			return err
		}
		if job.Args.Kill == "mid" && killOnce("mid") {
			w.say("kill mid %s", key)
			time.Sleep(time.Hour) // the test kills this process now: the row above is not committed
		}
		return nil
	})
	if r.Ran && job.Args.Kill == "committed" && killOnce("committed") {
		w.say("kill committed %s", key)
		time.Sleep(time.Hour) // the test kills this process now: committed with the job's completion
	}
	reason := r.Reason
	if reason == "" {
		reason = "-"
	}
	w.say("settled %s %d %s %s ran=%t duplicate=%t", key, job.ID, r.Action, reason, r.Ran, r.Duplicate)
	return idemriver.Settle(r)
}

// stormWorker is one worker process: a River client working the default queue until it is
// killed.
func stormWorker() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "storm worker:", err); return 1 }
	ctx := context.Background()
	schema := os.Getenv(childSchema)
	cfg, err := pgxpool.ParseConfig(os.Getenv(childDB))
	if err != nil {
		return fail(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	store, err := idem.NewStore(pool, &idem.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(err)
	}
	var out sync.Mutex
	w := &orderWorker{pool: pool, consumer: idemconsume.New(store, &idemconsume.Options{Operation: "order", Lease: stormLease}),
		say: func(format string, args ...any) {
			out.Lock()
			defer out.Unlock()
			os.Stdout.WriteString(fmt.Sprintf(format, args...) + "\n")
		}}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: schema,
		// One job at a time: a kill then hits only the job that reported the point it is killed
		// at, so the counts of kills are exact (the three processes still run jobs at once).
		Queues:                 map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:                workers,
		FetchPollInterval:      50 * time.Millisecond,
		FetchCooldown:          20 * time.Millisecond,
		LeaderElectionDisabled: true, // the test's own client is the leader, and runs the rescuer
		Logger:                 slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fail(err)
	}
	if err := client.Start(ctx); err != nil {
		return fail(err)
	}
	w.say("ready")
	time.Sleep(time.Hour)
	return 0
}

// stormCounts are the storm's numbers, from the workers' lines.
type stormCounts struct {
	mu                                      sync.Mutex
	runs                                    int
	runsOf                                  map[string]int // runs per job id
	killedMid, killedCommitted              int
	ackedRan, ackedDuplicate, snoozed, dead int
	reasons                                 map[string]int
	lines                                   []string
}

func (c *stormCounts) line(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, s)
	if len(c.lines) > 60 {
		c.lines = c.lines[1:]
	}
	f := strings.Fields(s)
	switch {
	case len(f) == 4 && f[0] == "got":
		c.runs++
		c.runsOf[f[2]]++
	case len(f) == 3 && f[0] == "kill" && f[1] == "mid":
		c.killedMid++
	case len(f) == 3 && f[0] == "kill" && f[1] == "committed":
		c.killedCommitted++
	case len(f) == 7 && f[0] == "settled":
		switch {
		case f[3] == "ack" && f[5] == "ran=true":
			c.ackedRan++
		case f[3] == "ack":
			c.ackedDuplicate++
		case f[3] == "redeliver":
			c.snoozed++
			c.reasons[f[4]]++
		case f[3] == "dead_letter":
			c.dead++
		}
	}
}

// TestStormKilledWorkers: 3 River worker processes run order jobs while the test kills them
// mid-job and after the job's commit; some orders are inserted twice at once, some again later
// (a producer that retried)
// and some order keys reused with other args. River's rescuer brings the killed workers' jobs
// back. Every order has exactly one effect, no job is lost, the reused keys are cancelled with
// the reason.
func TestStormKilledWorkers(t *testing.T) {
	t.Parallel()
	const (
		unique    = 40
		instances = 3
	)
	ctx := context.Background()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 4 + instances*5})
	m, err := rivermigrate.New(riverpgxv5.New(sch.Pool), &rivermigrate.Config{Schema: sch.Name, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("migrate River's tables: %v", err)
	}
	if _, err := sch.Pool.Exec(ctx, `CREATE TABLE effects (msg_id text NOT NULL, payload text NOT NULL, pid int NOT NULL);
		CREATE TABLE kills (msg_id text NOT NULL, point text NOT NULL, PRIMARY KEY (msg_id, point))`); err != nil {
		t.Fatal(err)
	}

	// The test's own client inserts the jobs and, started first, is the leader: it runs River's
	// rescuer, which makes the jobs of killed workers available again. Its queue gets no jobs.
	workers := river.NewWorkers()
	river.AddWorker(workers, &orderWorker{})
	client, err := river.NewClient(riverpgxv5.New(sch.Pool), &river.Config{
		Schema:               sch.Name,
		Queues:               map[string]river.QueueConfig{"leader_only": {MaxWorkers: 1}},
		Workers:              workers,
		RescueStuckJobsAfter: stormRescueAfter,
		JobTimeout:           time.Second,
		RetryPolicy:          retryAtOnce{},
		Logger:               slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := client.Stop(sctx); err != nil {
			t.Errorf("stop River: %v", err)
		}
	})

	key := func(i int) string { return fmt.Sprintf("order-%03d", i) }
	args := map[string]orderArgs{}
	wantKills := map[string]int{}
	var batch []river.InsertManyParams
	for i := range unique {
		a := orderArgs{Key: key(i), N: i}
		switch i % 10 {
		case 3:
			a.Kill = "mid"
		case 6:
			a.Kill = "committed"
		}
		wantKills[a.Kill]++
		args[a.Key] = a
		batch = append(batch, river.InsertManyParams{Args: a})
		if i%10 == 1 {
			// Twins: the same order inserted twice at once, so that two workers may run it at
			// the same time.
			batch = append(batch, river.InsertManyParams{Args: a})
		}
	}
	twins := len(batch) - unique
	if _, err := client.InsertMany(ctx, batch); err != nil {
		t.Fatal(err)
	}

	counts := &stormCounts{runsOf: map[string]int{}, reasons: map[string]int{}}
	fleet := proctest.New(t, "worker", []string{childEnv + "=1", childDB + "=" + sch.URL, childSchema + "=" + sch.Name}, counts.line)
	for range instances {
		fleet.Start()
	}

	// A producer that retried: 3 orders inserted again with the same args (done once, the second
	// job completed without a run); 3 order keys reused with other args (cancelled, key_reused).
	// Each is inserted once its first job is done, so the first one is the one kept.
	extras := map[string]orderArgs{}
	for _, i := range []int{0, 1, 2} {
		extras[key(i)] = args[key(i)]
	}
	for _, i := range []int{4, 5, 7} {
		extras[key(i)] = orderArgs{Key: key(i), N: i, Note: "another order under a reused key"}
	}
	const reused = 3
	inserted := map[string]bool{}

	// The rescuer looks every 30s: the deadline leaves room for two of its rounds.
	deadline := time.Now().Add(3 * time.Minute)
	var rows, distinct, completed, cancelled, total int
	for {
		select {
		case pid := <-fleet.Kills:
			fleet.Kill(pid) // by its PID, at the point it reported
			fleet.Start()
			continue
		case <-time.After(100 * time.Millisecond):
		}
		for k, a := range extras {
			if inserted[k] {
				continue
			}
			var done bool
			if err := sch.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM effects WHERE msg_id = $1)`, k).Scan(&done); err != nil {
				t.Fatal(err)
			}
			if done {
				if _, err := client.Insert(ctx, a, nil); err != nil {
					t.Fatal(err)
				}
				inserted[k] = true
			}
		}
		if err := sch.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effects), (SELECT count(DISTINCT msg_id) FROM effects),
			(SELECT count(*) FILTER (WHERE state = 'completed') FROM river_job), (SELECT count(*) FILTER (WHERE state = 'cancelled') FROM river_job),
			(SELECT count(*) FROM river_job)`).Scan(&rows, &distinct, &completed, &cancelled, &total); err != nil {
			t.Fatal(err)
		}
		if len(inserted) == len(extras) && completed+cancelled == total {
			break
		}
		if time.Now().After(deadline) {
			var states string
			_ = sch.Pool.QueryRow(ctx, `SELECT string_agg(state || ':' || n, ' ') FROM (SELECT state, count(*) n FROM river_job GROUP BY state) s`).Scan(&states)
			counts.mu.Lock()
			last := strings.Join(counts.lines, "\n")
			counts.mu.Unlock()
			t.Fatalf("the storm did not settle within 3 minutes: %d of %d orders have an effect, %d of %d extra jobs inserted, jobs by state: %s; the workers' last lines:\n%s%s",
				distinct, unique, len(inserted), len(extras), states, last, fleet.StderrTails())
		}
	}

	counts.mu.Lock()
	defer counts.mu.Unlock()
	redeliveries := 0
	for _, n := range counts.runsOf {
		redeliveries += n - 1
	}
	t.Logf("River storm: %d jobs (%d orders, %d of them inserted twice at once, %d inserted again later with the same args, %d keys reused with other args), %d worker processes started (%d at once), rescue after %s, lease %s",
		total, unique, twins, len(extras)-reused, reused, fleet.Started(), instances, stormRescueAfter, stormLease)
	t.Logf("runs %d (jobs run again after a kill or a snooze: %d), workers killed mid-job %d, killed after commit %d",
		counts.runs, redeliveries, counts.killedMid, counts.killedCommitted)
	t.Logf("completed after a run %d (+%d whose worker was killed after the commit), completed as duplicates without a run %d, snoozed %d %v, cancelled (dead letters) %d",
		counts.ackedRan, counts.killedCommitted, counts.ackedDuplicate, counts.snoozed, counts.reasons, counts.dead)
	t.Logf("jobs completed %d, cancelled %d, of %d; effects %d rows for %d orders (doubled %d), lost %d",
		completed, cancelled, total, rows, distinct, rows-distinct, unique-distinct)

	if rows != unique || distinct != unique {
		t.Errorf("%d effect rows for %d orders; want exactly one per order (%d)", rows, distinct, unique)
	}
	if jobs := unique + twins + len(extras); total != jobs || completed != jobs-reused || cancelled != reused {
		t.Errorf("%d jobs: %d completed, %d cancelled; want %d: %d and %d", total, completed, cancelled, jobs, jobs-reused, reused)
	}
	if counts.killedMid != wantKills["mid"] || counts.killedCommitted != wantKills["committed"] {
		t.Errorf("killed %d mid-job and %d after commit; want %d and %d", counts.killedMid, counts.killedCommitted, wantKills["mid"], wantKills["committed"])
	}
	// A duplicate's completion is River's own, after Work returned: a worker killed before it
	// was written leaves the job running, and its rescued run is a duplicate again. So at least
	// the twins' and the later inserts'.
	if want := twins + len(extras) - reused; counts.ackedDuplicate < want {
		t.Errorf("%d jobs completed as duplicates without a run; want at least %d (the twins' and the later inserts')", counts.ackedDuplicate, want)
	}
	var bad int
	if err := sch.Pool.QueryRow(ctx, `SELECT count(*) FROM effects e WHERE e.payload::jsonb->>'note' IS NOT NULL`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d effects came from a reused key's other args; want the first job's", bad)
	}
	var why int
	if err := sch.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'cancelled' AND errors[array_length(errors, 1)]->>'error' LIKE '%key_reused:%'`).Scan(&why); err != nil {
		t.Fatal(err)
	}
	if why != reused {
		t.Errorf("%d cancelled jobs record key_reused as their error; want %d", why, reused)
	}
}
