-- Lease mode's replay check with its guard, in one statement, at the head of the one-trip claim
-- on plain PostgreSQL. It returns the key's remembered completed row (replay.sql), if any, and
-- then divides by zero (SQLSTATE 22012) when there is one, which skips the rest of the batch (the
-- claim and the business BEGIN): the row is the answer, a replay or key reused, in one round trip
-- with nothing written. The row reaches the client before the error, as in
-- claim_read_guarded.sql: an append runs its branches in order, a plan that reads a CTE is never
-- parallel, and an error does not take back rows already sent.
--
-- Without a completed row it returns nothing and turns off synchronous_commit for the claim's own
-- transaction (see Store.claim for why that loses nothing), which saves the batch a statement of
-- its own for it: the statement runs in the batch's implicit transaction, which is the claim's
-- transaction (the fast claim's insert runs in it too), so the setting holds until the claim's
-- COMMIT, and the business
-- transaction after it commits synchronously again. The second branch has no FROM, so its
-- condition is evaluated exactly once, whether or not there is a row; OR evaluates set_config
-- only when the division did not fail. (On Citus a set_config would run on the worker the
-- statement goes to, not where the claim commits: there the claim sends replay.sql alone and SET
-- LOCAL statements instead.)
-- $1 tenant, $2 scope, $3 key.
WITH r AS MATERIALIZED (
{{.Inner}}
)
SELECT * FROM r
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL
WHERE 1 / (NOT EXISTS (SELECT FROM r))::int = 0 OR set_config('synchronous_commit', 'off', true) IS NULL
