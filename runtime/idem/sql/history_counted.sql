-- The answers counted in memory since the last flush (Store.flushReplays), one row per key and
-- kind: 'replayed' or 'key_reused', replays = how many, detail = what the kind's rows say.
-- Neither is written one by one: a hot key can be replayed, or retried with another request in a
-- client's loop, thousands of times a minute.
-- $1 tenants, $2 scopes, $3 keys, $4 operations (stored text), $5 counts, $6 kinds, $7 details:
-- arrays of one length.
INSERT INTO {{.Events}} (tenant, scope, key, kind, operation, replays, detail)
SELECT u.tenant, u.scope, u.key, u.kind, u.operation, u.n, NULLIF(u.detail, '')
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])
	AS u(tenant, scope, key, operation, n, kind, detail)
