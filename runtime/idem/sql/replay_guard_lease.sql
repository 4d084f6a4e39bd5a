-- The replay check's guard in lease mode's one-trip claim on plain PostgreSQL: as
-- replay_guard.sql, it divides by zero (SQLSTATE 22012) when the key has a remembered completed
-- row, which skips the rest of the batch. Without one it also turns off synchronous_commit for
-- the claim's own transaction (see Store.claim for why that loses nothing), which saves the batch
-- a statement of its own for it: the guard runs in the implicit transaction that the BEGIN
-- behind it turns into the claim's transaction, so the setting holds until the claim's COMMIT,
-- and the business transaction after it commits synchronously again. (On Citus a set_config
-- would run on the worker the statement goes to, not where the claim commits: there the claim
-- sends no guard and SET LOCAL statements instead.)
-- $1 tenant, $2 scope, $3 key.
SELECT 1 / (NOT EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3 AND k.state = 'complete' AND k.expires_at > statement_timestamp()
))::int, set_config('synchronous_commit', 'off', true)
