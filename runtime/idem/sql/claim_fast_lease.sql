-- Lease mode's fast claim on plain PostgreSQL, in one statement inside the claim's own
-- transaction (the batch's first BEGIN): the replay check (replay.sql, the key's remembered
-- completed row) and the fast claim's insert (claim_fast.sql's), which runs only when there is
-- no such row. It returns the completed row, if any, which is the answer (a replay, or key
-- reused), and then one row whose last column counts the keys inserted: 1 when this request won
-- a key nobody had, 0 when the key has a row (completed, or one the full claim must decide).
-- Nothing fails on purpose (see claim_lock.sql for why): the business transaction that the batch
-- begins for a replay is rolled back by the connection's next batch.
--
-- The insert's condition also turns off synchronous_commit for the claim's transaction (see
-- Store.claim for why that loses nothing) before the row is written; the setting holds until the
-- claim's COMMIT, and the business transaction after it commits synchronously again. One
-- statement where there were two (the check, then the insert), and a replay skips the insert's
-- probe of the key's index. (On Citus a set_config would run on the worker the statement goes
-- to, not where the claim commits: there the claim sends replay.sql and claim_fast.sql, and SET
-- LOCAL statements.)
-- $1 tenant, $2 scope, $3 key, $4 owner token, $5 operation, $6 fingerprint, $7 lease (ms),
-- $8 expiry (ms).
WITH done AS MATERIALIZED (
{{.Inner}}
), ins AS (
	INSERT INTO {{.Table}}
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
	SELECT $1, $2, $3, $5, $6, 'in_flight', $4::uuid,
		statement_timestamp() + $7::bigint * interval '1 millisecond', 1, statement_timestamp(),
		statement_timestamp() + $8::bigint * interval '1 millisecond'
	WHERE NOT EXISTS (SELECT FROM done) AND set_config('synchronous_commit', 'off', true) IS NOT NULL
	ON CONFLICT (tenant, scope, key) DO NOTHING
	RETURNING 1
)
SELECT done.*, NULL::int FROM done
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, count(*)::int FROM ins
