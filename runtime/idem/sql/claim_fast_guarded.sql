-- Lease mode's fast claim on plain PostgreSQL with its guard, in one statement: claim_fast.sql's
-- insert, and a division by zero (SQLSTATE 22012) when it inserted nothing (the key has a row),
-- which skips the rest of the batch: the claim's COMMIT and the business BEGIN. The claim runs in
-- the batch's implicit transaction (the COMMIT behind it commits that, and there is no BEGIN
-- ahead of it), so the error ends that transaction, which wrote nothing, and the connection is
-- idle when the batch ends: nothing to roll back before the full claim decides. (Behind a BEGIN
-- the failure would leave a failed transaction block that costs a ROLLBACK round trip.) This replaces an owner guard (owner_guard.sql) behind the COMMIT, a statement
-- that read the row again to tell whether the claim was this request's: a row inserted here is
-- new, in flight and this request's. (A lease so short that another request took it over between
-- this COMMIT and the business transaction's first statement is not caught here, as the owner
-- guard caught it; the completion's fence catches it, as it catches any lease lost while the
-- handler runs.)
--
-- Citus, where an INSERT inside a WITH is not routed as one statement, sends claim_fast.sql and
-- no guard.
-- Parameters as claim_fast.sql's.
WITH ins AS (
{{.Inner}}
	RETURNING 1
)
SELECT 1 / count(*)::int FROM ins
