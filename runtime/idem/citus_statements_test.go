//go:build citus

package idem_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/runtime/idem"
)

// prepareCounter counts the two-phase commits the coordinator starts for its sessions: with
// citus.log_remote_commands on and citus.grep_remote_commands matching PREPARE TRANSACTION, the
// coordinator sends its session a NOTICE ("issuing PREPARE TRANSACTION 'citus_…'") for each
// worker transaction it prepares, on the connection whose transaction it is. A transaction that
// commits on one worker sends none.
type prepareCounter struct {
	mu sync.Mutex
	// by connection: how many PREPAREs, and whether it is running a statement excused from the
	// count (the replays' flush, which spans tenants on purpose).
	excused map[*pgconn.PgConn]bool
	request atomic.Int64 // PREPAREs of transactions on the request path
	flush   atomic.Int64 // PREPAREs of the replays' flush
	// excuse is the statement whose PREPAREs are counted apart (empty: none).
	excuse atomic.Pointer[string]
}

const logPrepares = "%PREPARE TRANSACTION%"

func newPrepareCounter() *prepareCounter {
	return &prepareCounter{excused: map[*pgconn.PgConn]bool{}}
}

// configure makes the pool's sessions report their PREPAREs to c.
func (c *prepareCounter) configure(pc *pgxpool.Config) {
	pc.ConnConfig.RuntimeParams["citus.log_remote_commands"] = "on"
	pc.ConnConfig.RuntimeParams["citus.grep_remote_commands"] = logPrepares
	pc.ConnConfig.OnNotice = c.notice
	pc.ConnConfig.Tracer = c
}

func (c *prepareCounter) notice(conn *pgconn.PgConn, n *pgconn.Notice) {
	if !strings.Contains(n.Message, "PREPARE TRANSACTION") {
		return
	}
	c.mu.Lock()
	excused := c.excused[conn]
	c.mu.Unlock()
	if excused {
		c.flush.Add(1)
	} else {
		c.request.Add(1)
	}
}

func (c *prepareCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if e := c.excuse.Load(); e != nil && data.SQL == *e {
		c.mu.Lock()
		c.excused[conn.PgConn()] = true
		c.mu.Unlock()
	}
	return ctx
}

func (c *prepareCounter) TraceQueryEnd(_ context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	c.mu.Lock()
	delete(c.excused, conn.PgConn())
	c.mu.Unlock()
}

// exampleArgs are arguments for a statement's parameters, by the types the server infers for
// them (desc): $1, $2 and $3 text are the key's tenant, scope and key (every request statement
// leads with them), a uuid is the owner token, and the rest get a plausible value of their type.
func exampleArgs(desc *pgconn.StatementDescription, tenant, scope, key, token string) []any {
	args := make([]any, len(desc.ParamOIDs))
	for i, oid := range desc.ParamOIDs {
		switch oid {
		case pgtype.TextOID, pgtype.VarcharOID, pgtype.UnknownOID:
			args[i] = "x"
			if i < 3 {
				args[i] = []string{tenant, scope, key}[i]
			}
		case pgtype.UUIDOID:
			args[i] = token
		case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
			args[i] = 1
		case pgtype.IntervalOID:
			args[i] = time.Minute
		case pgtype.ByteaOID:
			args[i] = []byte("ok")
		case pgtype.TimestamptzOID:
			args[i] = time.Now()
		case pgtype.BoolOID:
			args[i] = false
		default:
			args[i] = nil
		}
	}
	return args
}

// TestCitusRequestStatements: every statement Citus's statement set sends on the request path,
// read from the Store's statement set (idem.RequestStatements, not a list kept here), is planned
// by Citus as one task on the tenant's shard, nothing pulled to the coordinator (or, touching no
// table, on the coordinator alone), and run for real in a transaction that has written the key's
// row, as the Store's do, prepares no transaction (no two-phase commit). The history claim as it
// was (its time left to the clock_timestamp() default) is the control: both checks must catch it.
func TestCitusRequestStatements(t *testing.T) {
	e := newCitusEnv(t, citusURL(t), true)
	s := e.store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	stmts, err := idem.RequestStatements(s)
	if err != nil {
		t.Fatal(err)
	}
	claimFast, lockWaitSave := "", ""
	for _, st := range stmts {
		switch st.Name {
		case "claimFast":
			claimFast = st.SQL
		case "lockWaitSave":
			lockWaitSave = st.SQL
		}
	}
	if claimFast == "" || lockWaitSave == "" {
		t.Fatal("the request statements have no claimFast or no lockWaitSave")
	}
	counter := newPrepareCounter()
	cc, err := pgx.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["search_path"] = e.schema
	cc.RuntimeParams["citus.log_remote_commands"] = "on"
	cc.RuntimeParams["citus.grep_remote_commands"] = logPrepares
	cc.OnNotice = counter.notice
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	claimDesc, err := conn.Prepare(ctx, "claimFast", claimFast)
	if err != nil {
		t.Fatal(err)
	}
	const tenant, scope = "tenant-05", "statements"
	token := "00000000-0000-4000-8000-000000000001"

	check := func(name, sql string, i int) (verdict string, ok bool) {
		desc, err := conn.Prepare(ctx, "", sql)
		if err != nil {
			return "prepare: " + err.Error(), false
		}
		key := fmt.Sprintf("%s-%d", name, i)
		args := exampleArgs(desc, tenant, scope, key, token)
		// The plan, as the Store's transactions get it (custom plans: docs/citus.md).
		tx, err := conn.Begin(ctx)
		if err != nil {
			return "begin: " + err.Error(), false
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
			return err.Error(), false
		}
		rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) "+sql, args...)
		var plan []string
		if err == nil {
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return "EXPLAIN: " + err.Error(), false
		}
		text := strings.Join(plan, "\n\t")
		scans := citusScan.FindAllString(text, -1)
		var tasks []string
		for _, m := range taskCount.FindAllStringSubmatch(text, -1) {
			tasks = append(tasks, m[1])
		}
		onTable := strings.Contains(sql, `"idempotency_keys`)
		switch {
		case !onTable && len(scans) > 0:
			return "touches no table but has a Citus scan:\n\t" + text, false
		case !onTable:
			verdict = "coordinator only (touches no distributed table)"
		case len(scans) != 1 || len(tasks) != 1 || tasks[0] != "1" || strings.Contains(text, "INSERT/SELECT method") ||
			strings.Contains(text, "Distributed Subplan") || strings.Contains(text, "INSERT ... SELECT"):
			return fmt.Sprintf("NOT one task on one shard (scans %v, task counts %v):\n\t%s", scans, tasks, text), false
		default:
			verdict = "one task on the tenant's shard"
		}
		// Run for real: the key's row written first (a write on the shard, as every Store
		// transaction has), then the statement, then COMMIT; count the PREPAREs.
		if _, err := tx.Exec(ctx, claimFast, exampleArgs(claimDesc, tenant, scope, key, token)...); err != nil {
			return "the key's claim: " + err.Error(), false
		}
		// lockWaitSave first, as the Store sends it before lockWaitRestore (it only sets settings).
		if _, err := tx.Exec(ctx, lockWaitSave); err != nil {
			return "lockWaitSave: " + err.Error(), false
		}
		before := counter.request.Load()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return verdict + "; run: " + err.Error(), false
		}
		if err := tx.Commit(ctx); err != nil {
			return verdict + "; commit: " + err.Error(), false
		}
		if n := counter.request.Load() - before; n != 0 {
			return fmt.Sprintf("%s, but its transaction prepared %d worker transaction(s) (two-phase commit):\n\t%s", verdict, n, text), false
		}
		return verdict + ", committed on one node (no PREPARE TRANSACTION)\n\t" + text, true
	}
	for i, st := range stmts {
		v, ok := check(st.Name, st.SQL, i)
		t.Logf("%-18s %s", st.Name, v)
		if !ok {
			t.Errorf("%s: %s", st.Name, v)
		}
	}
	// The control: the checks above catch the history claim as it was. With parameters Citus
	// cannot even EXPLAIN it; with the values written in, the plan says where it runs.
	pulled := idem.HistoryClaimPulledSQL(s)
	v, ok := check("historyClaimPulled", pulled, len(stmts))
	t.Logf("control: the history claim with at left to its clock_timestamp() default: %s", v)
	if ok {
		t.Errorf("the control (the history claim pulled to the coordinator) passed the checks: %s", v)
	}
	rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) "+pulled, pgx.QueryExecModeSimpleProtocol, tenant, scope, "control", token)
	var plan []string
	if err == nil {
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	t.Logf("control, its values written in: %v\n\t%s", err, strings.Join(plan, "\n\t"))
	if err != nil || !strings.Contains(strings.Join(plan, "\n"), "INSERT/SELECT method: pull to coordinator") {
		t.Errorf("the control's plan does not say it is pulled to the coordinator: %v %s", err, plan)
	}
	// and, run for real after a claim's write, it prepares a transaction: the counter counts.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := "control"
	before := counter.request.Load()
	_, err = tx.Exec(ctx, claimFast, exampleArgs(claimDesc, tenant, scope, key, token)...)
	if err == nil {
		_, err = tx.Exec(ctx, idem.HistoryClaimPulledSQL(s), tenant, scope, key, token)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		t.Fatalf("the control's transaction: %v", err)
	}
	n := counter.request.Load() - before
	t.Logf("control: the pulled history claim's transaction prepared %d worker transaction(s)", n)
	if n == 0 {
		t.Errorf("the control's transaction prepared no transaction: the counter of PREPAREs counts nothing")
	}
}

// TestCitusHistoryStormPreparesNothing: a storm of an operation that keeps a history (keys ×
// duplicates over tenants, fired at once, in each claim mode) commits every transaction on one
// worker: no request prepares a transaction. The replays' flush (one statement across tenants
// every few seconds, not per request) is counted apart. Each key has one payment and one
// claim row in its history.
func TestCitusHistoryStormPreparesNothing(t *testing.T) {
	counter := newPrepareCounter()
	e := newCitusEnv(t, citusURL(t), true, counter.configure)
	const keys, dups, tenants = 100, 8, 20
	for _, mode := range []idem.ClaimMode{idem.ClaimLease, idem.ClaimTransaction} {
		s := e.store(t)
		flush := idem.HistoryReplaysSQL(s)
		counter.excuse.Store(&flush)
		before, flushBefore := counter.request.Load(), counter.flush.Load()
		prefix := "storm-" + mode.String() + "-"
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
				p := &idem.DoParams{Tenant: fmt.Sprintf("tenant-%02d", k%tenants), Scope: "history", Key: fmt.Sprintf("%s%d", prefix, k),
					Operation: "createPayment", Fingerprint: "fp", Lease: 10 * time.Second, Claim: mode, History: true}
				r, err := s.Do(ctx, p, citusPay(&calls, 0))
				kind := "executed"
				switch {
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
		close(start)
		finished := make(chan struct{})
		go func() { done.Wait(); close(finished) }()
		recv(t, finished, 180*time.Second, mode.String()+": the storm's requests did not all answer")
		idem.FlushReplays(s)
		like := prefix + "%"
		payments := e.count(t, "SELECT count(*) FROM payments WHERE key LIKE $1", like)
		claimed := e.count(t, "SELECT count(*) FROM "+idem.HistoryTableName("idempotency_keys")+" WHERE key LIKE $1 AND kind = 'acquired'", like)
		prepared, flushPrepared := counter.request.Load()-before, counter.flush.Load()-flushBefore
		t.Logf("%-11s %d requests over %d tenants (history kept): payments %d, claims in the history %d, handler runs %d, answers %v; "+
			"worker transactions prepared (two-phase commit) by requests: %d; by the replays' flush: %d",
			mode, keys*dups, tenants, payments, claimed, calls.Load(), kinds, prepared, flushPrepared)
		if prepared != 0 {
			t.Errorf("%s: the storm's requests prepared %d worker transactions; want 0 (every request commits on the tenant's worker alone)", mode, prepared)
		}
		if payments != keys || claimed != keys || int(calls.Load()) != keys || kinds["executed"] != keys || kinds["replayed"] != keys*(dups-1) {
			t.Errorf("%s: %d payments, %d claims in the history, %d runs, answers %v; want %d of each, every duplicate replayed",
				mode, payments, claimed, calls.Load(), kinds, keys)
		}
	}
}
