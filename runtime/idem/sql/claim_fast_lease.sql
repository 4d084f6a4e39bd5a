-- Lease mode's fast claim on plain PostgreSQL, inside the claim's own transaction (the batch's
-- first BEGIN): claim_fast.sql's insert, which wins a key nobody has, followed in the same batch
-- by the replay check (replay.sql), which answers a key with a remembered completed row (a
-- replay, or key reused). A key with any other row is left to the full claim: the insert writes
-- nothing (ON CONFLICT DO NOTHING) and the check finds nothing. Whether it inserted is what
-- RETURNING returns (see claim_fast.sql), never its command tag. Nothing fails on purpose (see
-- claim_lock.sql for why): the business transaction that the batch begins for a replay is rolled
-- back by the connection's next batch.
--
-- Two plain statements, where one statement used to run the check and, only without a
-- completed row, the insert (a CTE, a UNION ALL and a count): PostgreSQL builds every node of a
-- statement's plan each time it runs it, whether the node runs or not, and that plan cost a
-- replay and a new key alike more than both plain statements do (about 70k instructions more
-- per request). A replay now pays the insert's probe of the key's index, which finds the row.
-- A PL/pgSQL function that ran the check and, only without a completed row, the insert (one
-- call, so a replay never set up the insert) was measured too: make bench-statements put the
-- call at 227k instructions for a new key, where these two statements cost 167k, and at 124k
-- for a replay, where they cost 142k. PL/pgSQL and SPI cost more per statement than the
-- protocol does, and first executions are the common case.
--
-- The insert's condition also turns off synchronous_commit for the claim's transaction (see
-- Store.claim for why that loses nothing): one statement where a SET LOCAL would be another. The
-- setting holds until the claim's COMMIT, and the business transaction after it commits
-- synchronously again. (On Citus a set_config would run on the worker the statement goes to,
-- not where the claim commits: there the claim sends claim_fast.sql and SET LOCAL statements.)
-- $1 tenant, $2 scope, $3 key, $4 owner token, $5 operation, $6 fingerprint, $7 lease and
-- $8 expiry (intervals).
INSERT INTO {{.Table}}
	(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
SELECT $1, $2, $3, $5, $6, {{inFlight}}, $4::uuid,
	statement_timestamp() + $7::interval, 1, statement_timestamp(),
	statement_timestamp() + $8::interval
WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (tenant, scope, key) DO NOTHING
RETURNING 1
