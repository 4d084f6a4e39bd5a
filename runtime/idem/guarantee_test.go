package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
	"github.com/idemgen/idemgen/runtime/idemtest"
	"github.com/idemgen/idemgen/runtime/internal/pgbouncertest"
)

// The guarantee table: every guarantee of the runtime, run on every claim path the Store can
// take, each reached through public configuration only (Config.Topology, the claim mode, a pool
// or a DB that is not one). Citus's statement set runs on plain PostgreSQL here (TopologyCitus),
// so that a change that breaks it fails here, without a cluster.

// guaranteePath is one row of the table: a claim path and the topology that selects it.
type guaranteePath struct {
	topology string // the table's column: postgres, citus-on-postgres, pgbouncer(<exec mode>)
	access   string // pool, or single: a DB that is not a pool (the Store holds no connection)
	mode     idem.ClaimMode
	setup    func(t *testing.T, g *guaranteeEnv)
}

func (p guaranteePath) name() string { return p.topology + "/" + p.access + "/" + p.mode.String() }

// guaranteeEnv is one row's store, on a schema of its own.
type guaranteeEnv struct {
	sch   *idemtest.Schema
	db    idem.DB
	cfg   idem.Config
	store *idem.Store
	cut   *commitCutter
	// ahead claims every key before Do, as idemhttp's edge does (Store.ClaimAhead): the row
	// proves the guarantees on the claim made ahead and taken by Do.
	ahead bool
	// deferWrites: the handlers defer their business writes (idem.Defer), which then travel with
	// the completion where the path allows: the row proves the guarantees with them there.
	deferWrites bool
}

// deferringKey marks a context whose guarantee handlers defer their writes (guaranteeEnv.deferWrites).
type deferringKey struct{}

// write runs a guarantee handler's business statement: deferred (idem.Defer) on a +defer row,
// else at once.
func write(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	if ctx.Value(deferringKey{}) != nil {
		return idem.Defer(ctx, tx, idem.Write{SQL: sql, Args: args})
	}
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// do is s.Do for the row: on an ahead row, the claim is made first (Store.ClaimAhead) and Do
// takes it, or answers the replay the claim found; a claim Do did not take is dropped after.
func (g *guaranteeEnv) do(ctx context.Context, s *idem.Store, p *idem.DoParams, fn idem.HandlerFunc) (*idem.DoResult, error) {
	if g.deferWrites {
		ctx = context.WithValue(ctx, deferringKey{}, true)
	}
	if !g.ahead {
		return s.Do(ctx, p, fn)
	}
	r, a := s.ClaimAhead(ctx, p)
	if r != nil {
		return r, nil
	}
	defer a.Drop(ctx)
	return s.Do(idem.WithAhead(ctx, a), p, fn)
}

// withAhead is paths and, for each, the same path with every claim made ahead (guaranteeEnv.ahead).
func withAhead(paths []guaranteePath) []guaranteePath {
	return withVariant(paths, "+ahead", func(g *guaranteeEnv) { g.ahead = true })
}

// withDefer is paths and, for each, the same path with the handlers' writes deferred
// (guaranteeEnv.deferWrites).
func withDefer(paths []guaranteePath) []guaranteePath {
	return withVariant(paths, "+defer", func(g *guaranteeEnv) { g.deferWrites = true })
}

// withVariant is paths and, for each, the same path named with suffix and set up by set too.
func withVariant(paths []guaranteePath, suffix string, set func(g *guaranteeEnv)) []guaranteePath {
	out := slices.Clone(paths)
	for _, p := range paths {
		setup := p.setup
		p.access += suffix
		p.setup = func(t *testing.T, g *guaranteeEnv) {
			setup(t, g)
			set(g)
		}
		out = append(out, p)
	}
	return out
}

// newStore is another Store on the row's DB and configuration.
func (g *guaranteeEnv) newStore(t *testing.T) *idem.Store {
	t.Helper()
	c := g.cfg
	s, err := idem.NewStore(g.db, &c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (g *guaranteeEnv) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := g.sch.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func (g *guaranteeEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := g.sch.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func (g *guaranteeEnv) table() string { return pgx.Identifier{g.sch.Name, g.sch.Table}.Sanitize() }

// commitCutter closes a connection as soon as it has written a COMMIT, while armed: the server
// receives the COMMIT (and commits, or not, if the close reaches it first), and the client never
// reads the answer.
type commitCutter struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

func (c *commitCutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: conn, c: c}, nil
}

type cutConn struct {
	net.Conn
	c *commitCutter
}

func (cc *cutConn) Write(b []byte) (int, error) {
	if !bytes.Contains(b, []byte("commit\x00")) && !bytes.Contains(b, []byte("commit /* idem */\x00")) || !cc.c.armed.CompareAndSwap(true, false) {
		return cc.Conn.Write(b)
	}
	n, err := cc.Conn.Write(b)
	cc.c.cuts.Add(1)
	cc.Conn.Close()
	return n, err
}

func plainPath(topology idem.Topology, single bool) func(t *testing.T, g *guaranteeEnv) {
	return func(t *testing.T, g *guaranteeEnv) {
		g.sch = idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 8, DialFunc: g.cut.dial})
		g.db = g.sch.Pool
		if single {
			g.db = hidden{g.sch.Pool}
		}
		g.cfg = *g.sch.Config()
		g.cfg.Topology = topology
		g.exec(t, `CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, tenant text NOT NULL DEFAULT '', amount integer NOT NULL)`)
	}
}

// bouncedPath reaches the schema through a pgbouncer of its own in transaction mode, with pgx in
// exec mode mode; the Store detects the pooler.
func bouncedPath(mode pgx.QueryExecMode) func(t *testing.T, g *guaranteeEnv) {
	return func(t *testing.T, g *guaranteeEnv) {
		g.sch = idemtest.TestSchema(t, &idemtest.SchemaOpts{MaxConns: 2})
		g.exec(t, `CREATE TABLE payments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, tenant text NOT NULL DEFAULT '', amount integer NOT NULL)`)
		b := pgbouncertest.Start(t, &pgbouncertest.Opts{SearchPath: g.sch.Name})
		pc, err := pgxpool.ParseConfig(b.URLWith(mode))
		if err != nil {
			t.Fatal(err)
		}
		pc.MaxConns = 8
		pc.ConnConfig.DialFunc = g.cut.dial
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		g.db = pool
		g.cfg = idem.Config{Schema: g.sch.Name, Table: g.sch.Table, Logger: slog.New(slog.DiscardHandler)}
	}
}

// guaranteePaths are the rows: every (topology, access, claim mode) the Store has a path for.
func guaranteePaths() []guaranteePath {
	var paths []guaranteePath
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		paths = append(paths,
			guaranteePath{"postgres", "pool", mode, plainPath(idem.TopologyPostgres, false)},
			guaranteePath{"postgres", "single", mode, plainPath(idem.TopologyPostgres, true)},
			guaranteePath{"citus-on-postgres", "pool", mode, plainPath(idem.TopologyCitus, false)},
			guaranteePath{"citus-on-postgres", "single", mode, plainPath(idem.TopologyCitus, true)},
		)
		for _, em := range allowedBehindPooler {
			paths = append(paths, guaranteePath{"pgbouncer(" + em.String() + ")", "pool", mode, bouncedPath(em)})
		}
	}
	return paths
}

// allowedBehindPooler are the exec modes the Store accepts behind a transaction-mode pooler,
// which docs/deploy.md lists: each is proven by the table's rows.
var allowedBehindPooler = []pgx.QueryExecMode{pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}

// guarantee is one column of the table.
type guarantee struct {
	name string
	run  func(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode)
}

var guarantees = []guarantee{
	{"64 duplicates: one run", guaranteeStorm},
	{"takeover of an abandoned claim", guaranteeTakeover},
	{"fencing of a lost lease", guaranteeFencing},
	{"mismatch while in flight", guaranteeMismatch},
	{"non-text tenant/scope/key", guaranteeNotText},
	{"caller gone before the claim", guaranteeGoneBefore},
	{"caller gone during the claim", guaranteeGoneDuring},
	{"lost COMMIT answer released", guaranteeLostCommit},
	{"replay after the TTL: new", guaranteeTTL},
	{"history of a completion and a release", guaranteeHistory},
	{"uncertain after a provider call", guaranteeUncertain},
	{"uncertain only after the call", guaranteeUncertainOnlyAfterCall},
	{"no provider call after takeover", guaranteeNoCallAfterTakeover},
	{"mismatched retries counted", guaranteeMismatchCounted},
	{"refused deferred write: nothing kept", guaranteeDeferRefused},
}

// TestGuarantees runs every guarantee on every path and prints the table.
func TestGuarantees(t *testing.T) {
	t.Parallel()
	runGuaranteeTable(t, withDefer(withAhead(guaranteePaths())))
}

// runGuaranteeTable runs every guarantee on each of paths, in parallel, and prints the table.
// make citus runs it on a real cluster too (TestCitusGuarantees).
func runGuaranteeTable(t *testing.T, paths []guaranteePath) {
	var mu sync.Mutex
	results := map[string]map[string]string{}
	claimPaths := map[string]string{}
	t.Cleanup(func() {
		var b strings.Builder
		w := len("topology/access/mode")
		for _, p := range paths {
			w = max(w, len(p.name()))
		}
		fmt.Fprintf(&b, "\n%-*s | %-26s", w, "topology/access/mode", "claim path")
		for i := range guarantees {
			fmt.Fprintf(&b, " | G%d", i+1)
		}
		b.WriteString("\n")
		for _, p := range paths {
			fmt.Fprintf(&b, "%-*s | %-26s", w, p.name(), claimPaths[p.name()])
			for _, gu := range guarantees {
				r := results[p.name()][gu.name]
				if r == "" {
					r = "--"
				}
				fmt.Fprintf(&b, " | %-*s", len(fmt.Sprint(len(guarantees)))+1, r)
			}
			b.WriteString("\n")
		}
		for i, gu := range guarantees {
			fmt.Fprintf(&b, "G%d: %s\n", i+1, gu.name)
		}
		t.Log(b.String())
	})
	for _, p := range paths {
		t.Run(p.name(), func(t *testing.T) {
			t.Parallel()
			g := &guaranteeEnv{cut: &commitCutter{}}
			p.setup(t, g)
			g.store = g.newStore(t)
			if strings.HasPrefix(p.topology, "pgbouncer") && g.store.Topology() != idem.TopologyPooler {
				t.Fatalf("through pgbouncer in transaction mode the Store detected %s; want pooler", g.store.Topology())
			}
			mu.Lock()
			claimPaths[p.name()] = idem.ClaimPath(g.store, p.mode)
			mu.Unlock()
			for _, gu := range guarantees {
				ok := t.Run(gu.name, func(t *testing.T) { gu.run(t, g, p.mode) })
				mu.Lock()
				if results[p.name()] == nil {
					results[p.name()] = map[string]string{}
				}
				results[p.name()][gu.name] = map[bool]string{true: "ok", false: "FAIL"}[ok]
				mu.Unlock()
			}
		})
	}
}

func gctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counted is a handler that counts its runs and inserts one business row for its key.
func counted(runs *atomic.Int32, hold time.Duration) idem.HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		runs.Add(1)
		c, _ := idem.ClaimFromContext(ctx)
		key := c.Key
		if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
			key = fmt.Sprintf("%x", key) // the business table holds text
		}
		if err := write(ctx, tx, "INSERT INTO payments (key, amount) VALUES ($1, 1)", key); err != nil {
			return nil, err
		}
		time.Sleep(hold)
		return &idem.Outcome{Status: 201, Body: []byte("paid")}, nil
	}
}

func guaranteeStorm(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "g", Key: "storm", Operation: "op", Fingerprint: "fp", Claim: mode, Wait: 20 * time.Second}
	var runs atomic.Int32
	start := make(chan struct{})
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			<-start
			r, err := g.do(ctx, g.store, p, counted(&runs, 20*time.Millisecond))
			if err == nil && string(r.Outcome.Body) != "paid" {
				err = fmt.Errorf("answer %q; want the first's", r.Outcome.Body)
			}
			if err != nil && !errors.Is(err, idem.ErrInProgress) {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a duplicate: %v", err)
	}
	if n, rows := runs.Load(), g.count(t, "SELECT count(*) FROM payments WHERE key = 'storm'"); n != 1 || rows != 1 {
		t.Fatalf("64 duplicates at once: %d handler runs, %d business rows; want 1 and 1", n, rows)
	}
}

// abandoned inserts key's row in flight with a lease that ran out, as a crashed holder leaves it.
func (g *guaranteeEnv) abandoned(t *testing.T, key string) {
	g.exec(t, "INSERT INTO "+g.table()+` (tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, expires_at)
		VALUES ('', 'g', $1, 'op', 'fp', 'in_flight', gen_random_uuid(), now() - interval '1 second', now() + interval '1 hour')`, key)
}

func guaranteeTakeover(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	g.abandoned(t, "abandoned")
	p := &idem.DoParams{Scope: "g", Key: "abandoned", Operation: "op", Fingerprint: "fp", Claim: mode}
	attempt := 0
	r, err := g.do(ctx, g.store, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		c, _ := idem.ClaimFromContext(ctx)
		attempt = c.Attempt
		return &idem.Outcome{Status: 201}, nil
	})
	if err != nil || r.Replayed || attempt != 2 {
		t.Fatalf("Do on an abandoned claim: %+v, %v, attempt %d; want it taken over as attempt 2", r, err, attempt)
	}
	if r, err := g.do(ctx, g.store, p, nil); err != nil || !r.Replayed {
		t.Fatalf("its replay: %+v, %v", r, err)
	}
}

// guaranteeFencing: in lease mode, a holder whose lease ran out (renewal off) and was taken over
// cannot commit its work; in transaction mode the claim lives in the holder's transaction, which
// nobody can take over while it runs: a duplicate past the lease does not run.
func guaranteeFencing(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	slow := g.newStore(t)
	idem.DisableRenewal(slow)
	p := &idem.DoParams{Scope: "g", Key: "fenced", Operation: "op", Fingerprint: "fp", Claim: mode, Lease: 150 * time.Millisecond, Timeout: 10 * time.Second}
	entered, finish := make(chan struct{}), make(chan struct{})
	release := letGo(t, finish)
	var runs atomic.Int32
	first := make(chan error, 1)
	go func() {
		_, err := g.do(ctx, slow, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-finish
			return counted(&runs, 0)(ctx, tx)
		})
		first <- err
	}()
	recv(t, entered, 10*time.Second, "the slow holder's handler never started")
	time.Sleep(300 * time.Millisecond) // past the lease
	q := *p
	q.Wait = 50 * time.Millisecond
	r, err := g.do(ctx, g.store, &q, counted(&runs, 0))
	release()
	ferr := recv(t, first, 15*time.Second, "the slow holder never returned")
	switch mode {
	case idem.ClaimLease:
		if err != nil || r.Replayed {
			t.Fatalf("the takeover: %+v, %v; want it to run", r, err)
		}
		if !errors.Is(ferr, idem.ErrLeaseLost) {
			t.Fatalf("the slow holder: %v; want ErrLeaseLost", ferr)
		}
	default:
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("a duplicate past the lease of a holder in transaction: %+v, %v; want ErrInProgress", r, err)
		}
		if ferr != nil {
			t.Fatalf("the holder: %v; want it to commit", ferr)
		}
	}
	if rows := g.count(t, "SELECT count(*) FROM payments WHERE key = 'fenced'"); rows != 1 {
		t.Fatalf("%d business rows; want 1 (only one holder commits)", rows)
	}
}

func guaranteeMismatch(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "g", Key: "mismatch", Operation: "op", Fingerprint: "fp", Claim: mode}
	entered, finish := make(chan struct{}), make(chan struct{})
	release := letGo(t, finish)
	first := make(chan error, 1)
	var runs atomic.Int32
	go func() {
		_, err := g.do(ctx, g.store, p, func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
			close(entered)
			<-finish
			return counted(&runs, 0)(ctx, tx)
		})
		first <- err
	}()
	recv(t, entered, 10*time.Second, "the holder's handler never started")
	other := *p
	other.Fingerprint, other.Wait = "other", 50*time.Millisecond
	_, err := g.do(ctx, g.store, &other, counted(&runs, 0))
	// Lease mode's row is written at the claim, so the mismatch is seen while in flight;
	// transaction mode writes its row with the outcome, so the other request can only wait.
	if !errors.Is(err, idem.ErrKeyReused) && (mode == idem.ClaimLease || !errors.Is(err, idem.ErrInProgress)) {
		t.Fatalf("another request under a key in flight: %v; want ErrKeyReused", err)
	}
	release()
	if err := recv(t, first, 10*time.Second, "the holder never returned"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.do(ctx, g.store, &other, counted(&runs, 0)); !errors.Is(err, idem.ErrKeyReused) {
		t.Fatalf("another request under a completed key: %v; want ErrKeyReused", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs; want 1", runs.Load())
	}
}

func guaranteeNotText(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	for _, v := range []string{"\xff", "a\x00b", "\xc3("} {
		p := &idem.DoParams{Tenant: v, Scope: v, Key: v, Operation: v, Fingerprint: v, Claim: mode}
		var runs atomic.Int32
		for i, wantReplay := range []bool{false, true} {
			r, err := g.do(ctx, g.store, p, counted(&runs, 0))
			if err != nil || r.Replayed != wantReplay {
				t.Fatalf("%q, request %d: %+v, %v; want replayed=%v", v, i+1, r, err, wantReplay)
			}
		}
	}
}

func guaranteeGoneBefore(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var runs atomic.Int32
	p := &idem.DoParams{Scope: "g", Key: "gone-before", Operation: "op", Fingerprint: "fp", Claim: mode}
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err == nil || runs.Load() != 0 {
		t.Fatalf("Do for a caller already gone: %v, %d runs; want an error and no run", err, runs.Load())
	}
	if n := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'gone-before'"); n != 0 {
		t.Fatalf("a caller already gone left %d rows; want none (nothing claimed for nobody)", n)
	}
}

func guaranteeGoneDuring(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	var wg sync.WaitGroup
	const n = 24
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*150*time.Microsecond)
			defer cancel()
			var runs atomic.Int32
			p := &idem.DoParams{Scope: "g", Key: fmt.Sprintf("gone-%d", i), Operation: "op", Fingerprint: "fp", Claim: mode}
			_, _ = g.do(ctx, g.store, p, counted(&runs, time.Millisecond))
		})
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "a key of a caller that left stayed in flight", func() bool {
		return g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key LIKE 'gone-%' AND state = 'in_flight'") == 0
	})
	ctx := gctx(t)
	for i := range n {
		p := &idem.DoParams{Scope: "g", Key: fmt.Sprintf("gone-%d", i), Operation: "op", Fingerprint: "fp", Claim: mode}
		var runs atomic.Int32
		if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil {
			t.Fatalf("the retry of %s after its caller left: %v; want it run or replayed", p.Key, err)
		}
	}
}

func guaranteeLostCommit(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "g", Key: "lost-commit", Operation: "op", Fingerprint: "fp", Claim: mode}
	var runs atomic.Int32
	g.cut.armed.Store(true)
	_, firstErr := g.do(ctx, g.store, p, counted(&runs, 0))
	g.cut.armed.Store(false)
	if g.cut.cuts.Load() == 0 {
		t.Fatalf("no COMMIT was cut (first: %v): the test tests nothing", firstErr)
	}
	// The retry may find the claim in flight for a moment: on Citus the cut COMMIT is a
	// two-phase commit that can land after the release looked. What must not happen is a key
	// held for its whole lease (a minute): the Store looks again in the background and takes its
	// own abandoned claim back, so a retry that waits a few seconds runs or replays.
	retry := *p
	retry.Wait = 5 * time.Second
	r, err := g.do(ctx, g.store, &retry, counted(&runs, 0))
	if err != nil {
		t.Fatalf("the retry after a lost COMMIT answer (first: %v): %v; want it run or replayed within 5s, not held for its lease", firstErr, err)
	}
	if rows := g.count(t, "SELECT count(*) FROM payments WHERE key = 'lost-commit'"); rows != 1 {
		t.Fatalf("%d business rows after the retry (replayed %v); want 1", rows, r.Replayed)
	}
	// The retry replayed: the first's work committed after all. Its error must not have said
	// otherwise (a log line "its work was rolled back" for work that committed).
	if r.Replayed && firstErr != nil && !errors.Is(firstErr, idem.ErrCommitUnknown) {
		t.Fatalf("the first request's work committed, but its error says nothing of it: %v; want ErrCommitUnknown", firstErr)
	}
}

func guaranteeTTL(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "g", Key: "ttl", Operation: "op", Fingerprint: "fp", Claim: mode}
	var runs atomic.Int32
	if _, err := g.do(ctx, g.store, p, counted(&runs, 0)); err != nil {
		t.Fatal(err)
	}
	g.exec(t, "UPDATE "+g.table()+" SET expires_at = now() - interval '1 second' WHERE key = 'ttl'")
	other := *p
	other.Fingerprint = "another request"
	r, err := g.do(ctx, g.store, &other, counted(&runs, 0))
	if err != nil || r.Replayed || runs.Load() != 2 {
		t.Fatalf("a key past its TTL: %+v, %v, %d runs; want it to behave as new", r, err, runs.Load())
	}
	if rows := g.count(t, "SELECT count(*) FROM payments WHERE key = 'ttl'"); rows != 2 {
		t.Fatalf("%d business rows; want 2", rows)
	}
}

// errRefusedWrite is what guaranteeDeferRefused's refused write fails the request with.
var errRefusedWrite = errors.New("the second write was refused")

// guaranteeDeferRefused: a handler writes a row, then defers (idem.Defer) a good write and one
// PostgreSQL refuses. Wherever the path sends them (with the completion, or at once), the
// request fails with the refused write's Refuse error, nothing of the run is kept, the key is
// given back (not an outage), and the retry runs anew.
func guaranteeDeferRefused(t *testing.T, g *guaranteeEnv, mode idem.ClaimMode) {
	ctx := gctx(t)
	p := &idem.DoParams{Scope: "g", Key: "refused", Operation: "op", Fingerprint: "fp", Claim: mode}
	var runs atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx) (*idem.Outcome, error) {
		runs.Add(1)
		if _, err := tx.Exec(ctx, "INSERT INTO payments (key, amount) VALUES ('refused', 1)"); err != nil {
			return nil, err
		}
		err := idem.Defer(ctx, tx,
			idem.Write{SQL: "INSERT INTO payments (key, amount) VALUES ('refused', 2)"},
			idem.Write{SQL: "INSERT INTO payments (key, amount) VALUES ('refused', NULL)", Refuse: func(err *pgconn.PgError) error {
				if err.Code == "23502" { // not_null_violation
					return errRefusedWrite
				}
				return nil
			}})
		if err != nil {
			return nil, err
		}
		return &idem.Outcome{Status: 201, Body: []byte("paid")}, nil
	}
	for try := 1; try <= 2; try++ {
		_, err := g.do(ctx, g.store, p, fn)
		if !errors.Is(err, errRefusedWrite) || idem.IsStoreUnavailable(err) {
			t.Fatalf("try %d: %v; want the refused write's error", try, err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs of two tries; want 2: the refused run's key was not given back", n)
	}
	if rows := g.count(t, "SELECT count(*) FROM payments WHERE key = 'refused'"); rows != 0 {
		t.Fatalf("%d business rows after refused runs; want 0", rows)
	}
	if rows := g.count(t, "SELECT count(*) FROM "+g.table()+" WHERE key = 'refused'"); rows != 0 {
		t.Fatalf("%d key rows held or completed after refused runs; want none", rows)
	}
}
