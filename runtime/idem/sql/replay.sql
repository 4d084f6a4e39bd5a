-- The replay check a transaction-mode claim on the key's row (on Citus, or without a pool)
-- sends ahead of its BEGIN, in the same batch: the key's completed row, while it is remembered
-- (its TTL has not run out). Lease mode's claim sends it too, behind its insert
-- (claim_fast_lease.sql). A completed row is
-- final until it expires, so finding it here decides the answer (replay, or key reused) without
-- a transaction. The guard behind it (replay_guard.sql) then fails on purpose, so the BEGIN and
-- the claim queued after it are skipped and the connection is idle again: a replay costs one
-- round trip, and no ROLLBACK.
-- With the replay cache on (Config.ReplayCacheBytes; .Remember) it also returns the row's expiry
-- and the statement's clock, from which the Store works out how long the row stays remembered,
-- which is how long the cache may keep it: no arithmetic in the statement, which PostgreSQL would
-- build anew each time it runs it (see claim_read.sql). Without the cache nothing needs them, and
-- each column returned costs the server its output on every replay (about 1,800 instructions).
-- $1 tenant, $2 scope, $3 key.
SELECT k.fingerprint, k.status, k.headers, k.body, k.reference{{if .Remember}}, k.expires_at, statement_timestamp(){{end}}
FROM {{.Table}} AS k
WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3 AND k.state = {{complete}} AND k.expires_at > statement_timestamp()
