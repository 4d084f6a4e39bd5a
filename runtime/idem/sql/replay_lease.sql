-- Lease mode's replay check at the head of the one-trip claim on plain PostgreSQL, in the claim's
-- own transaction (the batch's first BEGIN): the key's remembered completed row (replay.sql), if
-- any, which is the answer (a replay, or key reused). Nothing fails when there is one: the fast
-- claim's insert behind it then writes nothing, and the Store rolls back the business
-- transaction that the batch began; an error would cost the server more than that ROLLBACK (see
-- claim_lock.sql).
--
-- Its second branch, which has no FROM and so is evaluated exactly once whether or not there is
-- a row, turns off synchronous_commit for the claim's transaction (see Store.claim for why that
-- loses nothing) and returns nothing: that saves the batch a statement of its own for the
-- setting. The setting holds until the claim's COMMIT; the business transaction after it commits
-- synchronously again. (On Citus a set_config would run on the worker the statement goes to, not
-- where the claim commits: there the claim sends replay.sql alone and SET LOCAL statements
-- instead.)
-- $1 tenant, $2 scope, $3 key.
{{.Inner}}
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL WHERE set_config('synchronous_commit', 'off', true) IS NULL
