package idem

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Citus routes a statement to one shard (one worker, one round trip, the shard's own locks) only
// when it names the distribution column by equality, and refuses or pulls to the coordinator
// some shapes that plain PostgreSQL runs happily. TestCitusRules checks the runtime's statements
// (sql/*.sql and the few in Go) on the text, against the rules docs/citus.md gives, so a change
// that breaks them shows in the normal suite, without Citus (`make citus` runs them on a
// cluster):
//
//   - tenant: every statement on the key table names the tenant by equality ($1), or inserts it
//     as $1;
//   - volatile-do-update: no volatile function (statement_timestamp(), now(), …) in an
//     INSERT's DO UPDATE SET (Citus refuses it on distributed tables);
//   - volatile-returning: no volatile function in RETURNING (refused too: "non-IMMUTABLE
//     functions are not allowed in the RETURNING clause");
//   - volatile-case: no volatile function inside a CASE or a COALESCE of a statement on the key
//     table (refused in an UPDATE: "non-IMMUTABLE functions are not allowed in CASE or COALESCE
//     statements"; make citus found one in the completion, which plain PostgreSQL runs);
//   - insert-select: an INSERT … SELECT on the request path reads the key table alone, pinned to
//     the tenant by equality, and has no volatile function, nor leaves out a column whose default
//     is one (the history's at: clock_timestamp()); otherwise Citus cannot push it down to the
//     tenant's shard and pulls it through the coordinator (a two-phase commit on every request:
//     the history claim did, sql/history_claim.sql). No sub-select in DO UPDATE SET either.
//     Maintenance statements (the replays' flush spans tenants) are exempt;
//   - insert-in-cte: no INSERT inside a WITH (Citus runs it as a subplan of its own and the rest
//     on the coordinator: two steps, not one routed statement);
//   - row-lock: no FOR UPDATE/SHARE without a tenant equality (Citus refuses row locks on a
//     multi-shard query);
//   - set-config: no set_config that must reach the shard: inside a statement on the key table
//     it runs on the worker (and what it saves is not there for the coordinator), and a
//     lock_timeout set by set_config on the coordinator does not bound the worker's lock wait
//     (the bound is a SET LOCAL, which Citus propagates; set_config only restores the
//     coordinator's own value);
//   - notify: NOTIFY (pg_notify) only in statements that touch no distributed table, so that it
//     runs on the coordinator, where the listeners are;
//   - guard: a statement on the key table that fails on purpose (1 / 0) is one the Store leaves
//     out on Citus (rolePlainOnly, not checked here), where a statement failing on a worker costs the coordinator's
//     connection to it, or the completion's fence, which fails only for a lost lease.
//
// knownCitusViolations are the ones the runtime still has: the test fails on any other, and on
// one of these that is gone (remove it here, and from docs/citus.md).
var knownCitusViolations = []string{}

// citusMaintenance are the statements off the request path that span tenants on purpose (the
// purge): they need not name one, but must still take no row lock without one.
var citusMaintenance = map[string]bool{"purge": true, "purgeCitus": true, "purgeCount": true, "purgeHistory": true, "historyCounted": true}

// spansTenants says the statement name may span tenants on purpose: maintenance, and the
// operator's reads (statements.op: a lookup by key hash, lists and statistics across tenants,
// reconciliation's reads by provider key), which name a tenant when the operator gives one.
func spansTenants(name string) bool { return citusMaintenance[name] || strings.HasPrefix(name, "op.") }

// citusFence is the one statement on the key table that fails on a shard, and only when a lease
// was lost. (The guards that fail on purpose are plain PostgreSQL's alone: rolePlainOnly.)
var citusFence = map[string]bool{"complete": true}

func TestCitusRules(t *testing.T) {
	st, err := newStatements(citusTable, citusEvents, true)
	if err != nil {
		t.Fatal(err)
	}
	set, err := statementSet(&st)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for name, sql := range set {
		if roleOf(name, sql) == rolePlainOnly { // never sent with Citus's statement set
			continue
		}
		for _, rule := range citusViolations(name, strings.ToLower(strings.Join(strings.Fields(sql), " ")), citusTable) {
			found = append(found, name+": "+rule)
		}
	}
	slices.Sort(found)
	for _, v := range found {
		if slices.Contains(knownCitusViolations, v) {
			t.Logf("known Citus violation: %s", v)
		} else {
			t.Errorf("new Citus violation: %s (see the rules above TestCitusRules and docs/citus.md)", v)
		}
	}
	for _, v := range knownCitusViolations {
		if !slices.Contains(found, v) {
			t.Errorf("%s is no longer violated: remove it from knownCitusViolations and docs/citus.md", v)
		}
	}
}

// The key table and its history as TestCitusRules names them.
const (
	citusTable  = `"public"."idempotency_keys"`
	citusEvents = `"public"."idempotency_keys_events"`
)

// TestStatementRoles: every statement of the set (read from the statements struct) has its role
// said in statementRoles, and statementRoles names no statement the set does not have, so that
// a new statement is checked against Citus's rules, and EXPLAINed on a cluster, from the day it
// is added.
func TestStatementRoles(t *testing.T) {
	st, err := newStatements(citusTable, citusEvents, true)
	if err != nil {
		t.Fatal(err)
	}
	set, err := statementSet(&st)
	if err != nil {
		t.Fatal(err)
	}
	for name, sql := range set {
		if roleOf(name, sql) == 0 {
			t.Errorf("statement %s has no role: say in statementRoles (statements_export_test.go) whether Citus's statement set sends it on the request path", name)
		}
	}
	for name := range statementRoles {
		if _, ok := set[name]; !ok {
			t.Errorf("statementRoles names %s, which the statement set does not have", name)
		}
	}
	s := &Store{sql: st}
	req, err := RequestStatements(s)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range req {
		names = append(names, r.Name)
	}
	t.Logf("%d statements, %d on Citus's request path: %s", len(set), len(req), strings.Join(names, ", "))
	if !slices.Contains(names, "historyClaim") || !slices.Contains(names, "historyInsert1") {
		t.Errorf("the request statements %v lack the history's claim or insert", names)
	}
}

var (
	rowLock  = regexp.MustCompile(`\bfor (update|share|no key update|key share)\b`)
	volatile = regexp.MustCompile(`\b(statement_timestamp|now|clock_timestamp|transaction_timestamp|random|gen_random_uuid|nextval|timeofday)\s*\(`)
	tenantEq = regexp.MustCompile(`\btenant = \$1\b`)
	// pullsToCoordinator: the volatile functions proper (statement_timestamp() and now() are
	// stable), which keep Citus from pushing an INSERT … SELECT down.
	pullsToCoordinator = regexp.MustCompile(`\b(clock_timestamp|random|gen_random_uuid|nextval|timeofday)\s*\(`)
	// insertTenant: an INSERT whose first column is the tenant, given as $1 in VALUES.
	insertTenant = regexp.MustCompile(`^insert into \S+ (as \w+ )?\(tenant, [^)]*\) values \(\$1,`)
	// insertInCTE: an INSERT as a WITH query ("with x as (insert into").
	insertInCTE = regexp.MustCompile(`\bas (not )?(materialized )?\(\s*insert into\b`)
	// failsOnPurpose: a guard's or fence's division by a count or a truth value.
	failsOnPurpose = regexp.MustCompile(`\b1 / \(`)
	// setsLockTimeout and restoresLockTimeout: set_config of lock_timeout, and the one that puts
	// the saved value back (the coordinator's own; the workers get SET LOCAL … TO DEFAULT).
	setsLockTimeout     = regexp.MustCompile(`set_config\('lock_timeout',`)
	restoresLockTimeout = regexp.MustCompile(`set_config\('lock_timeout', current_setting\('idem\.saved_lock_timeout'\), true\)`)
)

// citusViolations lists the rules sql (lower case, single spaces) breaks.
func citusViolations(name, sql, table string) []string {
	var v []string
	onTable := strings.Contains(sql, table)
	if onTable && !spansTenants(name) && !tenantEq.MatchString(sql) && !insertTenant.MatchString(sql) {
		v = append(v, "tenant")
	}
	if i := strings.Index(sql, "do update set"); i >= 0 {
		set := sql[i:]
		if j := strings.Index(set, " returning "); j >= 0 {
			set = set[:j]
		}
		if volatile.MatchString(set) {
			v = append(v, "volatile-do-update")
		}
	}
	if i := strings.Index(sql, "insert into"); i >= 0 {
		ins := sql[i:]
		// The source of the INSERT follows its column list: "VALUES (…)" is routable, "SELECT …"
		// is INSERT … SELECT. A "(select" in DO UPDATE SET is a sub-select too.
		cols, src := ins, ins
		if j := strings.Index(ins, ") "); j >= 0 {
			cols, src = ins[:j], ins[j+2:]
		}
		conflict := ""
		if j := strings.Index(ins, "do update set"); j >= 0 {
			conflict = ins[j:]
		}
		if strings.Contains(conflict, "(select") ||
			strings.HasPrefix(src, "select") && !spansTenants(name) && !pushedDown(cols, src, table) {
			v = append(v, "insert-select")
		}
	}
	if i := strings.Index(sql, " returning "); i >= 0 && volatile.MatchString(sql[i:]) {
		v = append(v, "volatile-returning")
	}
	if onTable && volatileInCase(sql) {
		v = append(v, "volatile-case")
	}
	if insertInCTE.MatchString(sql) {
		v = append(v, "insert-in-cte")
	}
	if onTable && failsOnPurpose.MatchString(sql) && !citusFence[name] {
		v = append(v, "guard")
	}
	if rowLock.MatchString(sql) && !tenantEq.MatchString(sql) {
		v = append(v, "row-lock")
	}
	if strings.Contains(sql, "set_config(") {
		switch {
		case onTable:
			v = append(v, "set-config") // runs on the worker the statement is routed to
		case setsLockTimeout.MatchString(sql) && !restoresLockTimeout.MatchString(sql):
			v = append(v, "set-config") // runs on the coordinator: the worker's lock wait is not bounded
		}
	}
	if onTable && strings.Contains(sql, "pg_notify(") {
		v = append(v, "notify")
	}
	return v
}

// pushedDown says whether an INSERT … SELECT (cols: "insert into <target> (<columns>", src: its
// SELECT, lower case, single spaces) is one Citus pushes down to one shard: it reads the key table
// alone, pinned to the tenant $1, calls no volatile function, and gives the history's at (whose
// default, clock_timestamp(), is volatile) itself.
func pushedDown(cols, src, table string) bool {
	from := src
	if j := strings.Index(src, " from "); j >= 0 {
		from = src[j+len(" from "):]
	} else {
		return false // a SELECT of values, not of the co-located key table
	}
	if !strings.HasPrefix(from, table+" ") && from != table {
		return false
	}
	if strings.Contains(from, " join ") || strings.Contains(from, ", ") && strings.Index(from, ", ") < strings.Index(from+" where ", " where ") {
		return false
	}
	if !tenantEq.MatchString(src) || pullsToCoordinator.MatchString(cols+src) {
		return false
	}
	if strings.Contains(cols, "_events") && !regexp.MustCompile(`[(,] ?at[,)]`).MatchString(cols) {
		return false
	}
	return true
}

// volatileInCase says whether a volatile function is inside a CASE … END or a COALESCE(…) of
// sql (lower case, single spaces).
func volatileInCase(sql string) bool {
	for rest := sql; ; {
		i := strings.Index(rest, "case ")
		if i < 0 {
			break
		}
		body := rest[i:]
		if j := strings.Index(body, " end"); j >= 0 {
			body = body[:j]
		}
		if volatile.MatchString(body) {
			return true
		}
		rest = rest[i+len("case "):]
	}
	for rest := sql; ; {
		i := strings.Index(rest, "coalesce(")
		if i < 0 {
			return false
		}
		body, depth := rest[i+len("coalesce"):], 0
		for j, r := range body {
			if r == '(' {
				depth++
			} else if r == ')' {
				if depth--; depth == 0 {
					body = body[:j]
					break
				}
			}
		}
		if volatile.MatchString(body) {
			return true
		}
		rest = rest[i+len("coalesce("):]
	}
}

// TestCitusRulesCatch: each rule finds the shape it is about (so an empty list of violations
// means something).
func TestCitusRulesCatch(t *testing.T) {
	const table = `"public"."idempotency_keys"`
	for _, c := range []struct{ rule, sql string }{
		{"tenant", `SELECT 1 FROM "public"."idempotency_keys" WHERE scope = $2`},
		{"volatile-do-update", `INSERT INTO "public"."idempotency_keys" (tenant, key) VALUES ($1, $2) ON CONFLICT (tenant, key) DO UPDATE SET lease_expires_at = statement_timestamp() WHERE true`},
		{"volatile-returning", `INSERT INTO "public"."idempotency_keys" (tenant, key) VALUES ($1, $2) RETURNING statement_timestamp() - created_at`},
		{"insert-select", `INSERT INTO "public"."idempotency_keys" (tenant, key) SELECT $1, $2 WHERE NOT EXISTS (SELECT 1)`},
		// The history claim as it was: at left to its clock_timestamp() default, pulled to the coordinator.
		{"insert-select", `INSERT INTO "public"."idempotency_keys_events" (tenant, scope, key, kind) SELECT k.tenant, k.scope, k.key, 'acquired' FROM "public"."idempotency_keys" AS k WHERE k.tenant = $1`},
		{"insert-select", `INSERT INTO "public"."idempotency_keys_events" (tenant, scope, key, at, kind) SELECT k.tenant, k.scope, k.key, clock_timestamp(), 'acquired' FROM "public"."idempotency_keys" AS k WHERE k.tenant = $1`},
		{"insert-select", `INSERT INTO "public"."idempotency_keys_events" (tenant, scope, key, at, kind) SELECT k.tenant, k.scope, k.key, statement_timestamp(), 'acquired' FROM "public"."idempotency_keys" AS k WHERE k.scope = $2`},
		{"volatile-case", `UPDATE "public"."idempotency_keys" SET expires_at = CASE WHEN provider_at IS NULL THEN expires_at ELSE statement_timestamp() END WHERE tenant = $1`},
		{"volatile-case", `UPDATE "public"."idempotency_keys" SET expires_at = coalesce(expires_at, now()) WHERE tenant = $1`},
		{"insert-in-cte", `WITH ins AS (INSERT INTO "public"."idempotency_keys" (tenant, key) VALUES ($1, $2) RETURNING 1) SELECT count(*) FROM ins`},
		{"row-lock", `SELECT 1 FROM "public"."idempotency_keys" WHERE expires_at < now() FOR UPDATE`},
		{"set-config", `SELECT set_config('synchronous_commit', 'off', true) FROM "public"."idempotency_keys" WHERE tenant = $1`},
		{"set-config", `SELECT set_config('lock_timeout', $1, true)`},
		{"notify", `WITH gone AS (DELETE FROM "public"."idempotency_keys" WHERE tenant = $1 RETURNING 1) SELECT pg_notify($2, $3) FROM gone`},
		{"guard", `SELECT 1 / (SELECT count(*) FROM "public"."idempotency_keys" WHERE tenant = $1)::int`},
	} {
		got := citusViolations("example", strings.ToLower(strings.Join(strings.Fields(c.sql), " ")), table)
		if !slices.Contains(got, c.rule) {
			t.Errorf("%s: found %v; want %s", c.sql, got, c.rule)
		}
	}
}
