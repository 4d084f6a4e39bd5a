//go:build citus

package idem_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// The Citus verification: the runtime on a real cluster, with the key table distributed by
// tenant and co-located with a business table, as docs/citus.md describes. It needs a
// coordinator, so it is behind the citus build tag and out of the normal suite; `make citus`
// starts a cluster with scripts/citus.sh, runs it, and stops the cluster:
//
//	CITUS_DATABASE_URL=postgres://postgres@127.0.0.1:9700/postgres?sslmode=disable \
//	TEST_DATABASE_URL=… go test -tags citus -count=1 -v -run TestCitusCluster ./runtime/idem
//
// TEST_DATABASE_URL names the plain PostgreSQL the claim's latency is measured beside; without
// it, a table on the coordinator that is not distributed stands in for it.
const envCitus = "CITUS_DATABASE_URL"

// citusEnv is a fresh schema on a server with the migrated key table, its history and a
// payments table, all distributed by tenant (co-located) when distributed is set. configure, if
// given, adjusts the pool's configuration (the schema is its search_path already).
type citusEnv struct {
	schema string
	pool   *pgxpool.Pool
	cfg    *idem.Config
	url    string
}

func newCitusEnv(t *testing.T, url string, distributed bool, configure ...func(*pgxpool.Config)) *citusEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "idemcitus_" + hex.EncodeToString(b[:])
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %q: %v", url, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 16
	for _, c := range configure {
		c(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema on %s: %v", url, err)
	}
	icfg := &idem.Config{Schema: schema, Table: "idempotency_keys"}
	m, err := idem.NewMigrator(pool, icfg)
	if err == nil {
		_, err = m.Migrate(ctx, idem.DirectionUp, nil)
	}
	if err != nil {
		t.Fatalf("migrate %s: %v", schema, err)
	}
	// The business table has no unique index on purpose: a key executed twice shows as two
	// rows, not as an error.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".payments (tenant text NOT NULL DEFAULT '', key text NOT NULL, amount integer NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if distributed {
		for _, q := range []string{
			"SELECT create_distributed_table('" + schema + ".payments', 'tenant')",
			"SELECT create_distributed_table('" + schema + ".idempotency_keys', 'tenant', colocate_with => '" + schema + ".payments')",
			"SELECT create_distributed_table('" + schema + "." + idem.HistoryTableName("idempotency_keys") + "', 'tenant', colocate_with => '" + schema + ".payments')",
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	return &citusEnv{schema: schema, pool: pool, cfg: icfg, url: url}
}

func (e *citusEnv) store(t *testing.T) *idem.Store {
	t.Helper()
	cfg := *e.cfg
	// A storm queues thousands of requests for 16 connections, and on Citus every guard that
	// fails on purpose on a worker costs the coordinator a new connection to that worker (see
	// docs/citus.md): on a small shared machine the queue outlasts the default 5s.
	cfg.StoreTimeout = 60 * time.Second
	url := e.url
	// The listener has a connection of its own to the coordinator, where notifications are sent.
	cfg.ListenConn = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
	cfg.Logger = slog.New(slog.DiscardHandler) // the counts say what went wrong, once
	s, err := idem.NewStore(e.pool, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (e *citusEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// citusPay is the business handler: one payment row on the claim's tenant, in the transaction
// the Store hands it, so on Citus it lands on the shard of the key's row.
func citusPay(calls *atomic.Int32, hold time.Duration) idem.HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		if calls != nil {
			calls.Add(1)
		}
		c, _ := idem.ClaimFromContext(ctx)
		time.Sleep(hold)
		if _, err := tx.Exec(ctx, "INSERT INTO payments (tenant, key, amount) VALUES ($1, $2, 1)", c.Tenant, c.Key); err != nil {
			return nil, err
		}
		return &idem.Outcome{Status: 201, Body: []byte(c.Key)}, nil
	}
}

func citusURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv(envCitus)
	if url == "" {
		t.Fatalf("%s is not set: run `make citus` (it starts a cluster with scripts/citus.sh), or point %s at a Citus coordinator", envCitus, envCitus)
	}
	return url
}

func TestCitusCluster(t *testing.T) {
	url := citusURL(t)
	e := newCitusEnv(t, url, true)
	var shards int
	if err := e.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = $1::regclass", e.schema+".idempotency_keys").Scan(&shards); err != nil {
		t.Fatal(err)
	}
	t.Logf("key table %s.idempotency_keys distributed by tenant over %d shards, co-located with payments", e.schema, shards)

	t.Run("storms", func(t *testing.T) { citusStorms(t, e) })
	t.Run("purge", func(t *testing.T) { citusPurge(t, e) })
	t.Run("waiters wake", func(t *testing.T) { citusWake(t, e) })
	t.Run("waits bounded", func(t *testing.T) { citusBoundedWait(t, e) })
	t.Run("latency", func(t *testing.T) { citusLatency(t, e) })
}

// citusStorms: keys × duplicates over tenants, fired at once, in each claim mode: each key runs
// its handler once (one payment row), every duplicate is a replay or an in-progress answer, and
// no request fails.
func citusStorms(t *testing.T, e *citusEnv) {
	const keys, dups, tenants = 200, 16, 20
	for _, c := range []struct {
		name string
		mode idem.ClaimMode
		wait time.Duration
	}{
		{"lease", idem.ClaimLease, 0},
		{"lease, wait 20s", idem.ClaimLease, 20 * time.Second},
		{"transaction", idem.ClaimTransaction, 0},
	} {
		s := e.store(t)
		prefix := strings.NewReplacer(" ", "", ",", "-").Replace(c.name) + "-"
		var calls atomic.Int32
		var mu sync.Mutex
		kinds := map[string]int{}
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		for i := range keys * dups {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
				defer cancel()
				k := i % keys
				p := &idem.DoParams{Tenant: fmt.Sprintf("tenant-%02d", k%tenants), Scope: "createPayment",
					Key: fmt.Sprintf("%s%d", prefix, k), Operation: "createPayment", Fingerprint: "fp",
					Lease: 10 * time.Second, Claim: c.mode, Wait: c.wait}
				r, err := s.Do(ctx, p, citusPay(&calls, 50*time.Millisecond))
				kind := "executed"
				switch {
				case errors.Is(err, idem.ErrInProgress):
					kind = "in progress"
				case err != nil:
					kind = "error: " + err.Error()
				case r.Replayed:
					kind = "replayed"
				}
				mu.Lock()
				kinds[kind]++
				mu.Unlock()
			}()
		}
		ready.Wait()
		began := time.Now()
		close(start)
		finished := make(chan struct{})
		go func() { done.Wait(); close(finished) }()
		recv(t, finished, 180*time.Second, c.name+": the storm's requests did not all answer")
		took := time.Since(began)
		like := prefix + "%"
		payments := e.count(t, "SELECT count(*) FROM payments WHERE key LIKE $1", like)
		paidKeys := e.count(t, "SELECT count(DISTINCT key) FROM payments WHERE key LIKE $1", like)
		rows := e.count(t, "SELECT count(*) FROM idempotency_keys WHERE key LIKE $1 AND state = 'complete'", like)
		errs := 0
		for k, n := range kinds {
			if strings.HasPrefix(k, "error") {
				errs += n
			}
		}
		t.Logf("%-16s requests %d over %d tenants: keys complete %d, payments %d (distinct keys %d), handler runs %d, errors %d, answers %v, in %s",
			c.name, keys*dups, tenants, rows, payments, paidKeys, calls.Load(), errs, kinds, took.Round(time.Millisecond))
		if payments != keys || paidKeys != keys || rows != keys || int(calls.Load()) != keys || errs != 0 ||
			kinds["executed"] != keys || kinds["replayed"]+kinds["in progress"] != keys*(dups-1) {
			t.Errorf("%s: %d complete keys, %d payments (%d distinct), %d handler runs, answers %v; want %d of each, every duplicate a replay or in progress, no error",
				c.name, rows, payments, paidKeys, calls.Load(), kinds, keys)
		}
	}
}

// citusPurge: keys that expired are deleted by Purge, over every shard; live keys stay.
func citusPurge(t *testing.T, e *citusEnv) {
	s := e.store(t)
	const n = 120
	ctx := context.Background()
	for i := range n {
		p := &idem.DoParams{Tenant: fmt.Sprintf("tenant-%02d", i%20), Scope: "purge", Key: fmt.Sprintf("purge-%d", i),
			Operation: "createPayment", Fingerprint: "fp", TTL: time.Millisecond, Timeout: 100 * time.Millisecond}
		if _, err := s.Do(ctx, p, citusPay(nil, 0)); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	live := e.count(t, "SELECT count(*) FROM idempotency_keys WHERE scope <> 'purge'")
	waitFor(t, 10*time.Second, "the purge's keys never expired (a dry run never counted them all)", func() bool {
		r, err := s.Purge(ctx, &idem.PurgeOpts{DryRun: true})
		return err == nil && r.Deleted >= n
	})
	r, err := s.Purge(ctx, &idem.PurgeOpts{BatchSize: 50})
	if err != nil {
		t.Fatalf("purge on Citus: %v", err)
	}
	left := e.count(t, "SELECT count(*) FROM idempotency_keys WHERE scope = 'purge'")
	after := e.count(t, "SELECT count(*) FROM idempotency_keys WHERE scope <> 'purge'")
	t.Logf("purge: deleted %d expired keys in %d batches of at most 50; %d expired left, %d live keys kept of %d", r.Deleted, r.Batches, left, after, live)
	if r.Deleted != n || left != 0 || after != live {
		t.Errorf("purge deleted %d (want %d), left %d expired (want 0), kept %d live of %d", r.Deleted, n, left, after, live)
	}
}

// citusWake: a duplicate that waits for a key in flight wakes on the holder's notification
// when it commits or releases. Its fallback poll is an hour: only a notification that reaches
// the listener (connected to the coordinator) can end its wait within the deadline.
func citusWake(t *testing.T, e *citusEnv) {
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		for _, first := range []string{"commits", "fails"} {
			s := e.store(t)
			idem.SetFallbackPoll(s, time.Hour)
			p := &idem.DoParams{Tenant: "tenant-07", Scope: "wake", Key: "wake-" + mode.String() + "-" + first,
				Operation: "createPayment", Fingerprint: "fp", Claim: mode, Wait: 30 * time.Second}
			entered, finish := make(chan struct{}), make(chan struct{})
			release := letGo(t, finish)
			firstDone := make(chan error, 1)
			go func() {
				_, err := s.Do(context.Background(), p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					close(entered)
					<-finish
					if first == "fails" {
						return nil, errors.New("declined")
					}
					return citusPay(nil, 0)(ctx, tx)
				})
				firstDone <- err
			}()
			recv(t, entered, 10*time.Second, "the first request's handler never started")
			type result struct {
				r   *idem.DoResult
				err error
			}
			dup := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				r, err := s.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					return &idem.Outcome{Status: 201, Body: []byte("duplicate")}, nil
				})
				dup <- result{r, err}
			}()
			waitFor(t, 10*time.Second, "the duplicate never slept waiting for a notification", func() bool { return idem.Asleep(s) == 1 })
			let := time.Now()
			release()
			recv(t, firstDone, 10*time.Second, "the first request did not end once its handler was let go")
			d := recv(t, dup, 15*time.Second, "the duplicate did not end")
			woke := time.Since(let)
			var ok bool
			switch first {
			case "commits":
				ok = d.err == nil && d.r.Replayed && string(d.r.Outcome.Body) == p.Key
			case "fails":
				ok = d.err == nil && !d.r.Replayed && string(d.r.Outcome.Body) == "duplicate"
			}
			t.Logf("%-11s the first %-7s: the waiting duplicate answered %s after the first was let go (fallback poll 1h), result %+v, err %v",
				mode, first, woke.Round(time.Millisecond), d.r, d.err)
			if !ok {
				t.Errorf("%s, the first %s: duplicate = %+v, %v; want it woken by the notification", mode, first, d.r, d.err)
			}
			if err := s.ListenerHealth(); err != nil {
				t.Errorf("%s: the listener on the coordinator reports itself deaf: %v", mode, err)
			}
		}
	}
}

// citusBoundedWait: in transaction mode a duplicate waits on the holder's row lock on the
// worker, and that wait is bounded there (the claim's SET LOCAL lock_timeout reaches the worker):
// a duplicate with a short Wait answers in progress while the holder's transaction is still open.
// The holder's handler, after its claim, sees the worker's own lock_timeout again, not the
// claim's bound.
func citusBoundedWait(t *testing.T, e *citusEnv) {
	s := e.store(t)
	ctx := context.Background()
	const onWorker = "SELECT current_setting('lock_timeout') FROM idempotency_keys WHERE tenant = $1 AND scope = $2 AND key = $3"
	p := &idem.DoParams{Tenant: "tenant-11", Scope: "bounded", Key: "bounded", Operation: "createPayment", Fingerprint: "fp",
		Claim: idem.ClaimTransaction, Wait: 300 * time.Millisecond}
	entered, finish := make(chan string, 1), make(chan struct{})
	release := letGo(t, finish)
	firstDone := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			var lt string
			if err := tx.QueryRow(ctx, onWorker, p.Tenant, p.Scope, p.Key).Scan(&lt); err != nil {
				return nil, err
			}
			entered <- lt
			<-finish
			return citusPay(nil, 0)(ctx, tx)
		})
		firstDone <- err
	}()
	lt := recv(t, entered, 10*time.Second, "the holder's handler never started")
	dup := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, p, citusPay(nil, 0))
		dup <- err
	}()
	err := recv(t, dup, 10*time.Second, "a transaction-mode duplicate with a 300ms wait did not answer while the holder's transaction was open: its lock wait on the worker is not bounded")
	release()
	if err := recv(t, firstDone, 10*time.Second, "the holder did not end"); err != nil {
		t.Errorf("the holder: %v", err)
	}
	t.Logf("transaction mode: the duplicate answered %v while the holder held the key; the holder's handler saw lock_timeout %q on the worker", err, lt)
	if !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("duplicate: %v; want ErrInProgress", err)
	}
	if lt != "0" {
		t.Errorf("the handler saw lock_timeout %q on the worker after its claim; want the worker's own 0, not the claim's bound", lt)
	}
}

// The EXPLAIN of a statement on Citus: its distributed scans, and how many tasks each runs.
var (
	taskCount = regexp.MustCompile(`Task Count: (\d+)`)
	citusScan = regexp.MustCompile(`Custom Scan \(Citus [^)]*\)`)
)

// citusLatency times the claim (lease mode, a new key each time) and a whole Do of a new key
// in each claim mode, one after another, on Citus and on plain PostgreSQL. A report, not an
// assertion: the numbers go in the log.
func citusLatency(t *testing.T, e *citusEnv) {
	plainURL := os.Getenv("TEST_DATABASE_URL")
	plainName := "plain PostgreSQL (TEST_DATABASE_URL)"
	var plain *citusEnv
	if plainURL != "" {
		plain = newCitusEnv(t, plainURL, false)
	} else {
		plain = newCitusEnv(t, e.url, false)
		plainName = "a local table on the coordinator (TEST_DATABASE_URL unset)"
	}
	const n = 300
	for _, target := range []struct {
		name string
		env  *citusEnv
	}{{"Citus (distributed)", e}, {plainName, plain}} {
		s := target.env.store(t)
		ctx := context.Background()
		measure := func(what string, run func(i int) error) {
			for i := range 20 { // warm the connection's prepared statements
				if err := run(-1 - i); err != nil {
					t.Errorf("%s %s: %v", target.name, what, err)
					return
				}
			}
			d := make([]time.Duration, 0, n)
			for i := range n {
				began := time.Now()
				if err := run(i); err != nil {
					t.Errorf("%s %s: %v", target.name, what, err)
					return
				}
				d = append(d, time.Since(began))
			}
			slices.Sort(d)
			var sum time.Duration
			for _, x := range d {
				sum += x
			}
			t.Logf("%-58s %-32s p50 %7s  p90 %7s  mean %7s  (n=%d)", target.name, what,
				d[n/2].Round(10*time.Microsecond), d[n*9/10].Round(10*time.Microsecond), (sum / n).Round(10*time.Microsecond), n)
		}
		params := func(what string, i int, mode idem.ClaimMode) *idem.DoParams {
			return &idem.DoParams{Tenant: fmt.Sprintf("tenant-%02d", (i+40)%20), Scope: "latency", Key: fmt.Sprintf("%s-%d", what, i),
				Operation: "createPayment", Fingerprint: "fp", Claim: mode}
		}
		measure("claim (new key, lease mode)", func(i int) error {
			r, err := s.Claim(ctx, params("claim", i, idem.ClaimLease))
			if err == nil && r.Status != idem.ClaimAcquired {
				err = fmt.Errorf("status %v", r.Status)
			}
			return err
		})
		for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			measure("Do, new key, claim: "+mode.String(), func(i int) error {
				_, err := s.Do(ctx, params("do-"+mode.String(), i, mode), citusPay(nil, 0))
				return err
			})
			measure("Do, replay, claim: "+mode.String(), func(i int) error {
				r, err := s.Do(ctx, params("do-"+mode.String(), i, mode), citusPay(nil, 0))
				if err == nil && !r.Replayed {
					err = errors.New("not replayed")
				}
				return err
			})
		}
	}
}
