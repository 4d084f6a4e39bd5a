package idem

import (
	"embed"
	"fmt"
	"strings"
	"text/template"
)

// The statements live in sql/*.sql, one file each, with the key table's name filled in once
// per Store. Every statement on the request path takes the same leading parameters: $1 tenant
// (the distribution column, first in every WHERE), $2 scope, $3 key, $4 owner token.

//go:embed sql/*.sql
var sqlFS embed.FS

// statements are the SQL texts for one key table.
type statements struct {
	complete, release, renew, purge, purgeCount string
	replay, replayGuard, notify, ownerGuard     string
	// claimFastLease is lease mode's fast claim on plain PostgreSQL: claimFast's insert, which
	// also sets the claim's asynchronous commit (sql/claim_fast_lease.sql), sent ahead of the
	// replay check (replay).
	claimFastLease string
	// claimFast is the claim's fast path (sql/claim_fast.sql), a plain insert that wins a key
	// nobody has; either mode sends the full claim only when the key has a row.
	claimFast string
	// claimReadGuarded and claim are the full claim (sql/claim_read_guarded.sql, sql/claim.sql):
	// the row's answer with the guard that skips the write when nobody may take the row, and the
	// write that inserts the key or takes it over. Citus sends claimRead (sql/claim_read.sql),
	// the same read without the guard, in claimReadGuarded's place, and so do transaction
	// mode's contended claim under the key's lock and its second read of a row in flight
	// (Store.readWhole).
	claimRead, claimReadGuarded, claim string
	// claimReadLocked is the read behind transaction mode's lock (sql/claim_read_locked.sql):
	// claimRead without the columns only a row in flight needs.
	claimReadLocked string
	// claimLock, completeInsert, completeTakeover and notifyLocked are transaction mode's claim
	// on plain PostgreSQL (sql/claim_lock.sql, …): an advisory lock on the key for the business
	// transaction, the key's row written once, with the outcome (inserted, or rewritten when the
	// claim took an expired or abandoned row over), and the notification only a long hold needs.
	claimLock, completeInsert, completeTakeover, notifyLocked string
	// claimLockWait is the lock of transaction mode's contended claim on plain PostgreSQL, sent
	// when claimLock found the key's lock held: its wait bounded (sql/claim_lock_wait.sql).
	claimLockWait string
	// purgeCitus is Purge's batch on Citus (sql/purge_citus.sql), which refuses purge's window
	// on the DELETE itself.
	purgeCitus string

	// The key's history and the uncertain state (history.go, provider.go): the history row of
	// a lease-mode claim (sql/history_claim.sql), the flush of counted replays and mismatches, the two transitions to
	// uncertain (a release after a provider call, a claim that finds such a holder gone), the
	// mark of a provider call, and the history's purge. None is batched: a Store whose table
	// has no history yet (migration 6 not applied) still prepares its statements.
	historyClaim, historyCounted, uncertainHeld, uncertainAbandoned, providerMark, purgeHistory string
	// historyInsert[n] appends n history rows (Store.appendHistory), for n = 1 and 2.
	historyInsert [3]string

	// op are the operator's statements (operator.go): resolve, the history's reads,
	// reconciliation's read.
	op opStatements

	// batched are the statements the request path sends in batches on a connection the Store
	// holds, where some fail on purpose (a guard, the completion's fence) to skip the rest. pgx
	// forgets the statements of a batch that failed, so each would be prepared anew on the
	// connection's next request, costing round trips and parsing; the Store prepares these once
	// per connection under their own text instead (pgx.Conn.Prepare), which pgx keeps whatever a
	// batch does.
	batched []string
}

// newStatements renders the statements for table; remember says the Store keeps a replay cache,
// whose entries need to know how long a replayed row stays remembered (sql/replay.sql).
func newStatements(table, events string, remember bool) (statements, error) {
	var st statements
	// Each statement once: its file, where it goes, and whether the request path batches it (see
	// batched). In this order, since the guarded read wraps the read (its Inner).
	for _, s := range []struct {
		file    string
		dst     *string
		batched bool
	}{
		{"claim_fast", &st.claimFast, true}, {"claim_fast_lease", &st.claimFastLease, true},
		{"claim_read", &st.claimRead, true}, {"claim_read_guarded", &st.claimReadGuarded, true}, {"claim", &st.claim, true},
		{"owner_guard", &st.ownerGuard, true}, {"replay", &st.replay, true}, {"replay_guard", &st.replayGuard, true},
		{"complete", &st.complete, true}, {"notify", &st.notify, true},
		{"claim_lock", &st.claimLock, true}, {"claim_read_locked", &st.claimReadLocked, true}, {"claim_lock_wait", &st.claimLockWait, true},
		{"complete_insert", &st.completeInsert, true}, {"complete_takeover", &st.completeTakeover, true}, {"notify_locked", &st.notifyLocked, true},
		{"release", &st.release, false}, {"renew", &st.renew, false},
		{"purge", &st.purge, false}, {"purge_count", &st.purgeCount, false}, {"purge_citus", &st.purgeCitus, false},
		{"history_claim", &st.historyClaim, false}, {"history_counted", &st.historyCounted, false},
		{"uncertain_held", &st.uncertainHeld, false}, {"uncertain_abandoned", &st.uncertainAbandoned, false},
		{"provider_mark", &st.providerMark, false}, {"purge_history", &st.purgeHistory, false},
		{"op_resolve_lock", &st.op.resolveLock, false}, {"op_resolve_completed", &st.op.resolveCompleted, false},
		{"op_resolve_failed", &st.op.resolveFailed, false}, {"op_resolve_history", &st.op.resolveHistory, false},
		{"op_history", &st.op.history, false}, {"op_gone_keys", &st.op.goneKeys, false},
		{"op_provider_calls", &st.op.providerCalls, false}, {"op_provider_calls_by_key", &st.op.providerCallsByKey, false}, {"op_key_fates", &st.op.keyFates, false}, {"op_key_rows", &st.op.keyRows, false},
		{"op_keys", &st.op.keys, false}, {"op_clock", &st.op.clock, false}, {"op_key_stats", &st.op.keyStats, false},
	} {
		sql, err := renderSQL(s.file, sqlVars{Table: table, Events: events, Remember: remember, Inner: st.claimRead})
		if err != nil {
			return st, err
		}
		*s.dst = sql
		if s.batched {
			st.batched = append(st.batched, sql)
		}
	}
	// The Store's own statements that touch no table, batched too.
	st.batched = append(st.batched, beginSQL, commitSQL, rollbackSQL, propagateSetSQL, asyncCommitSQL, customPlanSQL, lockWaitSave, lockWaitDefault, lockWaitRestore)
	st.batched = append(st.batched, lockWaitSQL[:]...)
	for n := 1; n < len(st.historyInsert); n++ {
		st.historyInsert[n] = historyInsertSQL(events, n)
	}
	return st, nil
}

// sqlVars are what a sql/*.sql file may use: the key table's sanitised name, for the guarded
// read the statement it wraps, the history table's, and whether the Store keeps a replay cache.
type sqlVars struct {
	Table, Events, Inner string
	Remember             bool
}

// renderSQL is sql/file.sql rendered with v, without its comments, with the shared fragments
// (sql/fragments.sql) defined for it.
func renderSQL(file string, v sqlVars) (string, error) {
	name := "sql/" + file + ".sql"
	t := template.New(name).Option("missingkey=error").Funcs(stateFuncs)
	for _, f := range []string{"sql/fragments.sql", name} {
		src, err := sqlFS.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("idem: %s: %w", f, err)
		}
		if t, err = t.Parse(string(src)); err != nil {
			return "", fmt.Errorf("idem: %s: %w", f, err)
		}
	}
	var b strings.Builder
	if err := t.Execute(&b, v); err != nil {
		return "", fmt.Errorf("idem: %s: %w", name, err)
	}
	return stripComments(b.String()), nil
}

// stripComments drops the files' whole-line comments: they are for readers of the .sql files,
// and need not travel to the server with every request (nor show in pg_stat_statements).
func stripComments(sql string) string {
	var b strings.Builder
	for line := range strings.Lines(sql) {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "--") || t == "" {
			continue
		}
		b.WriteString(line)
	}
	return strings.TrimRight(b.String(), "\n")
}

// beginSQL, commitSQL and rollbackSQL are the Store's own BEGIN, COMMIT and ROLLBACK in its
// batches. Their texts are the Store's alone: the Store prepares them by name on the connections
// it uses (see batched), and pgx runs a prepared statement for any query with the same text, so a
// plain "begin" would turn the application's own begins on those connections into prepared ones.
const (
	beginSQL    = "begin /* idem */"
	commitSQL   = "commit /* idem */"
	rollbackSQL = "rollback /* idem */"
)
