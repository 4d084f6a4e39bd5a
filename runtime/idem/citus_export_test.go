//go:build citus

package idem

import "time"

// CitusStatements are the statements s sends, by name, with example parameters in the order
// each takes them: the Citus harness EXPLAINs each on a cluster. tenant, scope, key and token
// name an existing key; the notification channel and payload are s's own.
func CitusStatements(s *Store, tenant, scope, key, token string) map[string]CitusStatement {
	r := rowOf(&DoParams{Tenant: tenant, Scope: scope, Key: key})
	t, scope, key := r.tenant, r.scope, r.key
	lead := []any{t, scope, key, token}
	with := func(more ...any) []any { return append(append([]any{}, lead...), more...) }
	claim := with("charge", "fp", 60*time.Second, 24*time.Hour)
	st := map[string]CitusStatement{
		"claimFast":       {s.sql.claimFast, claim, false},
		"claimRead":       {s.sql.claimRead, []any{t, scope, key, "fp"}, false},
		"claim":           {s.sql.claim, claim, false},
		"complete":        {s.sql.complete, with(int32(201), nil, []byte("ok"), nil, 24*time.Hour), false},
		"release":         {s.sql.release, with(), false},
		"renew":           {s.sql.renew, with(60 * time.Second), false},
		"replay":          {s.sql.replay, []any{t, scope, key}, false},
		"replayGuard":     {s.sql.replayGuard, []any{t, scope, key}, false},
		"ownerGuard":      {s.sql.ownerGuard, with(), false},
		"notify":          {s.sql.notify, []any{channelOf(s.table), "payload"}, false},
		"propagateSet":    {propagateSetSQL, nil, false},
		"asyncCommit":     {asyncCommitSQL, nil, false},
		"lockWaitSave":    {lockWaitSave, nil, false},
		"lockWaitDefault": {lockWaitDefault, nil, false},
		"lockWaitRestore": {lockWaitRestore, nil, false},
		"purge":           {s.sql.purgeCitus, []any{int64(1000), int64(0), int64(125)}, true},
		"purgeCount":      {s.sql.purgeCount, nil, true},
	}
	for i, sql := range lockWaitSQL {
		st["lockWait"+lockWaitSteps[i].String()] = CitusStatement{sql, nil, false}
	}
	return st
}

// CitusStatement is one statement for CitusStatements; Maintenance marks the ones that span
// tenants on purpose (the purge).
type CitusStatement struct {
	SQL         string
	Args        []any
	Maintenance bool
}
