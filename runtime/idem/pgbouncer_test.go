package idem_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemhttp"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/pgbouncertest"
)

// The exec modes pgx works in through pgbouncer in transaction mode: every one that neither
// prepares statements by name nor splits a statement over two round trips. cache_statement (pgx's
// default) and describe_exec are refused (TestPgbouncerRefusesTheStatementCache,
// TestPgbouncerDescribeExecStorm).
var bouncedModes = allowedBehindPooler

// bounced is a test's schema reached through its own pgbouncer in transaction mode.
type bounced struct {
	sch *idemtest.Schema
	b   *pgbouncertest.Bouncer
}

func newBounced(t *testing.T) *bounced {
	t.Helper()
	sch := idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 2})
	if _, err := sch.Pool.Exec(context.Background(), `CREATE TABLE payments (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, tenant text NOT NULL DEFAULT '', amount integer NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &bounced{sch: sch, b: pgbouncertest.Start(t, &pgbouncertest.Opts{SearchPath: sch.Name})}
}

// pool is a pool of conns connections through pgbouncer in exec mode mode.
func (bb *bounced) pool(t *testing.T, mode pgx.QueryExecMode, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(bb.b.URLWith(mode))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// store is a Store on pool; cfg may be nil. Its logs go to the returned buffer.
func (bb *bounced) store(t *testing.T, pool *pgxpool.Pool, cfg *idem.Config) (*idem.Store, *lockedBuffer) {
	t.Helper()
	c := idem.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema, c.Table = bb.sch.Name, bb.sch.Table
	logs := &lockedBuffer{}
	if c.Logger == nil {
		c.Logger = newDebugLogger(logs)
	}
	s, err := idem.NewStore(pool, &c)
	if err != nil {
		t.Fatalf("NewStore through pgbouncer: %v", err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

func (bb *bounced) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := bb.sch.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestPgbouncerRefusesTheStatementCache: pgx's statement cache (its default exec mode) cannot
// work through a pooler in transaction mode; NewStore says so, and what to set, instead of
// letting requests fail one by one. Through pgbouncer the Store prepares nothing by name in the
// modes that work; on a direct connection it still does.
func TestPgbouncerRefusesTheStatementCache(t *testing.T) {
	t.Parallel()
	bb := newBounced(t)
	pool := bb.pool(t, pgx.QueryExecModeCacheStatement, 2)
	_, err := idem.NewStore(pool, bb.sch.Config())
	if !errors.Is(err, idem.ErrPoolerMode) {
		t.Fatalf("NewStore with pgx's statement cache through pgbouncer = %v; want ErrPoolerMode", err)
	}
	for _, want := range []string{"default_query_exec_mode=cache_describe", "idem.TopologyPostgres"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name the fix %q: %v", want, err)
		}
	}
	t.Logf("refusal: %v", err)
	if _, err := idem.NewStore(pool, &idem.Config{Schema: bb.sch.Name, Pooler: idem.PoolerTransaction}); !errors.Is(err, idem.ErrPoolerMode) {
		t.Errorf("NewStore with Pooler: PoolerTransaction and the statement cache = %v; want ErrPoolerMode", err)
	}

	s, _ := bb.store(t, bb.pool(t, pgx.QueryExecModeCacheDescribe, 2), nil)
	if idem.PreparesByName(s) {
		t.Error("through pgbouncer in cache_describe mode the Store prepares its statements by name")
	}
	direct, err := idem.NewStore(bb.sch.Pool, bb.sch.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if !idem.PreparesByName(direct) {
		t.Error("on a direct connection in pgx's default mode the Store does not prepare its statements by name")
	}
}

// TestPgbouncerStorms: in every exec mode that works through pgbouncer in transaction mode, and
// both claim modes, keys × duplicates fired at once execute each key exactly once, and every
// request gets an answer that is not a 5xx. The listener goes through pgbouncer too (nobody set
// Config.ListenConn), so it is deaf: waits end by polling.
func TestPgbouncerStorms(t *testing.T) {
	t.Parallel()
	bb := newBounced(t)
	const keys, dups = 24, 8
	for _, mode := range bouncedModes {
		for _, cm := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
			pool := bb.pool(t, mode, 8)
			s, _ := bb.store(t, pool, nil)
			idem.SetListenCheck(s, time.Second, 500*time.Millisecond)
			p := policy()
			p.Claim = cm
			p.Wait = 20 * time.Second
			prefix := fmt.Sprintf("%s-%s-", mode, cm)
			var calls atomic.Int32
			fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
				calls.Add(1)
				time.Sleep(200 * time.Millisecond) // keep the first in flight while its duplicates arrive
				return insertPayment(1)(ctx, tx)
			}
			kinds := map[string]int{}
			var mu sync.Mutex
			var fivexx int
			var waited []time.Duration
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			for i := range keys * dups {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					ready.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					began := time.Now()
					r, err := idemhttp.Serve(ctx, s, p, request(fmt.Sprintf("%s%d", prefix, i%keys), "fp"), fn)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						fivexx++
						kinds["error: "+err.Error()]++
					case r.Kind == idemhttp.ResultProblem && r.Problem.Status >= 500:
						fivexx++
						kinds[kindName(r)]++
					default:
						kinds[kindName(r)]++
						if r.Kind == idemhttp.ResultReplayed {
							waited = append(waited, time.Since(began))
						}
					}
				}()
			}
			ready.Wait()
			close(start)
			finished := make(chan struct{})
			go func() { done.Wait(); close(finished) }()
			recv(t, finished, 90*time.Second, fmt.Sprintf("%s %s: the storm's requests did not all answer", mode, cm))
			payments := bb.count(t, "SELECT count(*) FROM payments WHERE key LIKE $1", prefix+"%")
			rows := bb.count(t, "SELECT count(*) FROM "+s.Table()+" WHERE key LIKE $1", prefix+"%")
			slices.Sort(waited)
			p50 := time.Duration(0)
			if len(waited) > 0 {
				p50 = waited[len(waited)/2]
			}
			// Nobody set Config.ListenConn: the listener, if a duplicate started it, went through
			// pgbouncer, so it never heard and the waiters polled (TestPgbouncerDeafListener
			// shows it finding that out).
			woke := "polling (listener not started: no duplicate found its key in flight)"
			if idem.ListenerStarted(s) {
				waitFor(t, 30*time.Second, fmt.Sprintf("%s %s: the listener behind pgbouncer never found out it is deaf", mode, cm),
					func() bool { return s.ListenerHealth() != nil })
				woke = "polling (the listener found itself deaf)"
			}
			t.Logf("%-15s %-11s requests %d, keys %d, payments %d, handler runs %d, 5xx %d, results %v; duplicates' wait p50 %s, woke by %s",
				mode, cm, keys*dups, rows, payments, calls.Load(), fivexx, kinds, p50.Round(time.Millisecond), woke)
			if payments != keys || rows != keys || calls.Load() != keys || fivexx != 0 || kinds["executed"] != keys || kinds["replayed"] != keys*(dups-1) {
				t.Errorf("%s %s: %d keys, %d payments, %d handler runs, %d 5xx, results %v; want %d of each, no 5xx, every duplicate replayed",
					mode, cm, rows, payments, calls.Load(), fivexx, kinds, keys)
			}
		}
	}
}

// TestPgbouncerDeafListener: a listener behind pgbouncer in transaction mode hears nothing (its
// LISTEN registered on a server connection pgbouncer hands to others). Its self-check finds that
// out: a warning, EventListenerDeaf for the metric, ListenerHealth's error, and the waiting
// duplicate, whose fallback poll is an hour, still gets its replay, by polling on purpose. With
// Config.ListenConn pointing past pgbouncer, the same duplicate wakes on the holder's
// notification.
func TestPgbouncerDeafListener(t *testing.T) {
	t.Parallel()
	bb := newBounced(t)
	for _, mode := range bouncedModes {
		for _, listen := range []string{"through pgbouncer", "direct"} {
			var deaf, heard atomic.Int32
			cfg := &idem.Config{Observer: func(_ context.Context, e idem.Event) {
				switch e.Kind {
				case idem.EventListenerDeaf:
					deaf.Add(1)
				case idem.EventListenerHeard:
					heard.Add(1)
				}
			}}
			if listen == "direct" {
				url := bb.sch.URL
				cfg.ListenConn = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
			}
			s, logs := bb.store(t, bb.pool(t, mode, 4), cfg)
			idem.SetFallbackPoll(s, time.Hour)
			idem.SetListenCheck(s, time.Hour, 500*time.Millisecond)
			key := fmt.Sprintf("%s-%s", mode, listen)
			p := &idem.DoParams{Key: key, Operation: "charge", Fingerprint: "fp", Claim: idem.ClaimLease, Wait: 30 * time.Second}
			entered, finish := make(chan struct{}), make(chan struct{})
			release := letGo(t, finish)
			firstDone := make(chan error, 1)
			go func() {
				_, err := s.Do(context.Background(), p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
					close(entered)
					<-finish
					return pay(1, "first")(ctx, tx)
				})
				firstDone <- err
			}()
			recv(t, entered, 10*time.Second, "the first request's handler never started")
			dup := make(chan error, 1)
			var dupResult *idem.DoResult
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				r, err := s.Do(ctx, p, pay(2, "duplicate"))
				dupResult = r
				dup <- err
			}()
			switch listen {
			case "through pgbouncer":
				waitFor(t, 30*time.Second, key+": the listener behind pgbouncer never found out it is deaf (health, event, warning)", func() bool {
					return s.ListenerHealth() != nil && deaf.Load() > 0 && strings.Contains(logs.String(), "cannot hear notifications")
				})
				if deaf.Load() != 1 || !strings.Contains(logs.String(), "cannot hear notifications") || idem.Listening(s) {
					t.Errorf("%s: deaf listener: %d listener_deaf events, listening %v, logs:\n%s; want one event, a warning, not listening", key, deaf.Load(), idem.Listening(s), logs)
				}
			case "direct":
				waitFor(t, 30*time.Second, key+": the duplicate never slept waiting for a notification", func() bool { return idem.Asleep(s) == 1 })
				if err := s.ListenerHealth(); err != nil || deaf.Load() != 0 {
					t.Errorf("%s: direct listener: health %v, %d listener_deaf events; want healthy", key, err, deaf.Load())
				}
			}
			release()
			if err := recv(t, firstDone, 10*time.Second, key+": the first request did not end"); err != nil {
				t.Fatalf("%s: first: %v", key, err)
			}
			if err := recv(t, dup, 15*time.Second, key+": the duplicate did not end (a deaf listener's waiter must poll)"); err != nil || !dupResult.Replayed {
				t.Fatalf("%s: duplicate = %+v, %v; want the first answer replayed", key, dupResult, err)
			}
			t.Logf("%-15s listener %-17s: health %v; listener_deaf events %d; the duplicate woke by %s", mode, listen,
				s.ListenerHealth() == nil, deaf.Load(), map[string]string{"through pgbouncer": "polling", "direct": "notification"}[listen])
		}
	}
}

// TestPgbouncerOutage: the database behind pgbouncer refuses connections and its sessions end;
// through pgbouncer, in every supported exec mode, requests fail closed (store-unavailable, no
// handler run) and work again once the database is back.
func TestPgbouncerOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name, dbURL := outageDatabase(t)
	b := pgbouncertest.Start(t, &pgbouncertest.Opts{Database: name})
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	direct, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	m, err := idem.NewMigrator(direct, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, idem.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	direct.Close()
	db := pgx.Identifier{name}.Sanitize()
	for _, mode := range bouncedModes {
		cfg, _ := pgxpool.ParseConfig(b.URLWith(mode))
		cfg.MaxConns = 2
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		store, err := idem.NewStore(pool, &idem.Config{StoreTimeout: 2 * time.Second, Logger: newDebugLogger(&lockedBuffer{})})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		runs := 0
		fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			runs++
			return &idem.Outcome{Status: 201}, nil
		}
		serve := func(key string) *idemhttp.Result {
			t.Helper()
			r, err := idemhttp.Serve(ctx, store, policy(), request(mode.String()+key, "fp"), fn)
			if err != nil {
				t.Fatalf("%s: Serve(%s): %v", mode, key, err)
			}
			return r
		}
		if r := serve("before"); r.Kind != idemhttp.ResultExecuted || runs != 1 {
			t.Fatalf("%s: before the outage: %s", mode, kindName(r))
		}
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false"); err != nil {
			t.Fatal(err)
		}
		// pg_terminate_backend only signals, and a login that passed the connection check before the
		// ALTER committed still starts a session: terminate until the database has none.
		waitFor(t, 10*time.Second, mode.String()+": the database's sessions did not all end", func() bool {
			var left int
			if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1", name).Scan(&left); err != nil {
				t.Fatal(err)
			}
			return left == 0
		})
		outage := map[string]int{}
		for _, key := range []string{"during-1", "during-2", "before"} {
			r := serve(key)
			outage[kindName(r)]++
			if r.Kind != idemhttp.ResultProblem || r.Problem.Code != idemhttp.CodeStoreUnavailable || runs != 1 {
				t.Fatalf("%s: during the outage, key %s: %s (runs %d); want store-unavailable and no run", mode, key, kindName(r), runs)
			}
		}
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true"); err != nil {
			t.Fatal(err)
		}
		// pgbouncer waits server_login_retry (1s here) after a failed login before it tries again.
		var after *idemhttp.Result
		waitFor(t, 15*time.Second, string(mode.String())+": requests did not work again after the outage", func() bool {
			after = serve("during-1")
			return after.Kind != idemhttp.ResultProblem
		})
		if after.Kind != idemhttp.ResultExecuted || runs != 2 {
			t.Fatalf("%s: after the outage, a key refused during it: %s; want executed", mode, kindName(after))
		}
		if r := serve("before"); r.Kind != idemhttp.ResultReplayed || runs != 2 {
			t.Fatalf("%s: after the outage, a key completed before it: %s; want replayed", mode, kindName(r))
		}
		t.Logf("%-15s outage through pgbouncer: before executed; during %v; after: executed, replayed; handler runs %d", mode, outage, runs)
	}
}

// outageDatabase creates a database of the test's own, which it may take down, and drops it
// when the test ends; it returns its name and URL.
func outageDatabase(t *testing.T) (name, dbURL string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name = "idemtest_down_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), idemtest.URL(t))
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close(context.Background())
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(idemtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return name, u.String()
}

// TestPgbouncerDescribeExecStorm is why describe_exec is refused behind a transaction-mode
// pooler. pgx's describe_exec sends a statement's Parse and Describe in one round trip and its
// Bind and Execute in the next; pgbouncer in transaction mode may lend the server connection to
// another client between the two, so one client's parameters run in another's unnamed statement.
// A storm of two different statements, each checking its own answer, through one pgbouncer with
// few server connections: in describe_exec some answers are another statement's (or fail), in
// the modes the Store allows there none is. The Store refuses describe_exec there at NewStore.
func TestPgbouncerDescribeExecStorm(t *testing.T) {
	t.Parallel()
	bb := newBounced(t)
	for _, mode := range append([]pgx.QueryExecMode{pgx.QueryExecModeDescribeExec}, bouncedModes...) {
		pool := bb.pool(t, mode, 16)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wrong, failed, ran atomic.Int64
		var firstWrong atomic.Value
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := range 150 {
					var err error
					var got, want string
					if w%2 == 0 {
						var n int64
						err = pool.QueryRow(ctx, "SELECT $1::bigint * 2 AS doubled", int64(i)).Scan(&n)
						got, want = strconv.FormatInt(n, 10), strconv.Itoa(2*i)
					} else {
						err = pool.QueryRow(ctx, "SELECT 'w' || $1::text || $2::text AS joined", "x", strconv.Itoa(i)).Scan(&got)
						want = "wx" + strconv.Itoa(i)
					}
					ran.Add(1)
					switch {
					case err != nil:
						failed.Add(1)
						firstWrong.CompareAndSwap(nil, err.Error())
					case got != want:
						wrong.Add(1)
						firstWrong.CompareAndSwap(nil, fmt.Sprintf("got %q, want %q", got, want))
					}
				}
			})
		}
		wg.Wait()
		cancel()
		t.Logf("%-15s through pgbouncer (transaction mode): %d statements, %d answered another statement's result, %d failed; first: %v",
			mode, ran.Load(), wrong.Load(), failed.Load(), firstWrong.Load())
		bad := wrong.Load() + failed.Load()
		if mode == pgx.QueryExecModeDescribeExec {
			if bad == 0 {
				t.Errorf("describe_exec ran %d statements through pgbouncer without a wrong answer: the refusal may be lifted", ran.Load())
			}
			s, err := idem.NewStore(pool, &idem.Config{Schema: bb.sch.Name, Table: bb.sch.Table})
			if !errors.Is(err, idem.ErrPoolerMode) || !strings.Contains(fmt.Sprint(err), "describe") {
				if s != nil {
					s.Close()
				}
				t.Errorf("NewStore in describe_exec through pgbouncer = %v; want ErrPoolerMode naming describe_exec", err)
			}
		} else if bad != 0 {
			t.Errorf("%s: %d wrong or failed statements through pgbouncer; want none", mode, bad)
		}
	}
}
