package idem

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// The statement set, read from the statements struct itself (sql.go), so that the Citus checks
// (TestCitusRules here, the EXPLAIN of every request statement on a cluster in make citus) cover a
// statement the day it is added, without anyone adding it to a list: a statement whose role is
// not said below fails TestStatementRoles.

// stmtRole is what a statement is to Citus.
type stmtRole int

const (
	// roleRequest: sent on the request path with Citus's statement set, so it must run on the
	// tenant's shard alone (router), or on the coordinator alone when it touches no table.
	roleRequest stmtRole = iota + 1
	// rolePlainOnly: sent only with plain PostgreSQL's statement set (a guard that fails on
	// purpose, an advisory lock and what follows it, lease mode's fast claim with its setting).
	rolePlainOnly
	// roleMaintenance: off the request path, across tenants on purpose (purge, the replays' flush).
	roleMaintenance
	// roleUtility: a transaction's BEGIN, COMMIT or ROLLBACK, or a SET: no plan to explain.
	roleUtility
)

// statementRoles says the role of every statement of the set, by name (statementSet's names).
var statementRoles = map[string]stmtRole{
	"claimFast": roleRequest, "claimRead": roleRequest, "claim": roleRequest, "complete": roleRequest,
	"release": roleRequest, "renew": roleRequest, "replay": roleRequest, "notify": roleRequest,
	"historyClaim": roleRequest, "historyInsert1": roleRequest, "historyInsert2": roleRequest,
	"uncertainHeld": roleRequest, "uncertainAbandoned": roleRequest, "providerMark": roleRequest,
	"lockWaitSave": roleRequest, "lockWaitRestore": roleRequest,

	"claimFastLease": rolePlainOnly, "claimReadGuarded": rolePlainOnly, "ownerGuard": rolePlainOnly,
	"replayGuard": rolePlainOnly, "claimLock": rolePlainOnly, "claimLockWait": rolePlainOnly,
	"claimReadLocked": rolePlainOnly, "completeInsert": rolePlainOnly, "completeTakeover": rolePlainOnly,
	"notifyLocked": rolePlainOnly,

	"purge": roleMaintenance, "purgeCount": roleMaintenance, "purgeCitus": roleMaintenance,
	"purgeHistory": roleMaintenance, "historyCounted": roleMaintenance,

	"begin": roleUtility, "commit": roleUtility, "rollback": roleUtility, "propagateSet": roleUtility,
	"asyncCommit": roleUtility, "syncCommit": roleUtility, "customPlan": roleUtility, "lockWaitDefault": roleUtility,
}

// ownStatements are the Store's statements that are constants in Go, not files in sql/, by name.
func ownStatements() map[string]string {
	own := map[string]string{
		"begin": beginSQL, "commit": commitSQL, "rollback": rollbackSQL, "propagateSet": propagateSetSQL,
		"asyncCommit": asyncCommitSQL, "syncCommit": syncCommitSQL, "customPlan": customPlanSQL,
		"lockWaitSave": lockWaitSave, "lockWaitDefault": lockWaitDefault, "lockWaitRestore": lockWaitRestore,
	}
	for i, sql := range lockWaitSQL {
		own["lockWait"+lockWaitSteps[i].String()] = sql
	}
	return own
}

// roleOf is the role of the statement name, sql in the set; 0 when none is said.
func roleOf(name, sql string) stmtRole {
	if slices.Contains(lockWaitSQL[:], sql) { // SET LOCAL lock_timeout, one per step of the bounded wait
		return roleUtility
	}
	return statementRoles[name]
}

// statementSet is every statement of st by name: each string field of the statements struct
// under its field's name, each of an array field under its name and index (historyInsert1), and
// the Store's own statements (ownStatements). It fails on a statement the request path batches
// (statements.batched) that is none of these, and on a field of a kind it cannot read.
func statementSet(st *statements) (map[string]string, error) {
	set := ownStatements()
	v, ty := reflect.ValueOf(st).Elem(), reflect.TypeOf(st).Elem()
	for i := range ty.NumField() {
		f, fv := ty.Field(i), v.Field(i)
		switch {
		case f.Name == "batched":
		case fv.Kind() == reflect.String:
			set[f.Name] = fv.String()
		case fv.Kind() == reflect.Array && fv.Type().Elem().Kind() == reflect.String:
			for j := range fv.Len() {
				if s := fv.Index(j).String(); s != "" {
					set[fmt.Sprintf("%s%d", f.Name, j)] = s
				}
			}
		default:
			return nil, fmt.Errorf("statements.%s is a %s: say how statementSet reads it", f.Name, fv.Type())
		}
	}
	texts := make([]string, 0, len(set))
	for _, sql := range set {
		texts = append(texts, sql)
	}
	for _, sql := range st.batched {
		if !slices.Contains(texts, sql) {
			return nil, fmt.Errorf("the request path batches a statement statementSet does not name: %s", sql)
		}
	}
	return set, nil
}

// NamedStatement is one statement of a Store's set, by name.
type NamedStatement struct {
	Name, SQL string
}

// RequestStatements are the statements s sends on the request path with Citus's statement set,
// read from its statement set (statementSet), sorted by name: the Citus harness EXPLAINs each on a
// cluster. It fails on a statement whose role statementRoles does not say.
func RequestStatements(s *Store) ([]NamedStatement, error) {
	set, err := statementSet(&s.sql)
	if err != nil {
		return nil, err
	}
	var out []NamedStatement
	for name, sql := range set {
		switch roleOf(name, sql) {
		case roleRequest:
			out = append(out, NamedStatement{name, sql})
		case 0:
			return nil, fmt.Errorf("statement %s (%s) has no role in statementRoles", name, strings.Join(strings.Fields(sql), " "))
		}
	}
	slices.SortFunc(out, func(a, b NamedStatement) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// HistoryClaimSQL is s's history claim (sql/history_claim.sql), and HistoryClaimPulledSQL the
// same statement as it was before it gave the time itself (the history's clock_timestamp()
// default), which Citus pulls to the coordinator: the cluster test's control.
func HistoryClaimSQL(s *Store) string { return s.sql.historyClaim }

func HistoryClaimPulledSQL(s *Store) string {
	return strings.Replace(strings.Replace(s.sql.historyClaim, "key, at, kind", "key, kind", 1), "k.key, statement_timestamp(), ", "k.key, ", 1)
}
