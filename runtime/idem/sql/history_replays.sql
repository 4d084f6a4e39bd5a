-- The replays counted in memory since the last flush (Store.flushReplays), one row per key:
-- kind 'replayed', replays = how many. Replays are not written one by one: a hot key can be
-- replayed thousands of times a minute.
-- $1 tenants, $2 scopes, $3 keys, $4 operations (stored text), $5 counts: arrays of one length.
INSERT INTO {{.Events}} (tenant, scope, key, kind, operation, replays)
SELECT u.tenant, u.scope, u.key, 'replayed', u.operation, u.n
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[]) AS u(tenant, scope, key, operation, n)
