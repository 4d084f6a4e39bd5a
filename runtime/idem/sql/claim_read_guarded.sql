-- The claim's read (claim_read.sql) and its guard in one statement, on plain PostgreSQL. It
-- returns the read's row, if any, and then, when that row may not be taken (in flight, completed,
-- or a different request), divides by zero (SQLSTATE 22012): the guard, whose failure skips the
-- rest of the batch (the claim's write, or the BEGIN behind transaction mode's lock). Without
-- such a row it returns the row or nothing, and the write decides. One statement where there
-- were two (a separate guard re-read the row), and one snapshot, so the read and the guard
-- cannot disagree. The row goes to the client before the error: the UNION ALL's
-- first branch runs to the end before the second starts (an append runs its branches in order,
-- and a plan that reads a CTE is never parallel), PostgreSQL sends each row as it is produced,
-- and an error does not take back rows already sent (TestGuardedReadAnswersUnderParallelPlans). So a replay, an in-progress answer and a mismatch still get the row
-- they are answered from, and a key without a row (or with a takeable one) goes on to the write
-- or the BEGIN behind.
--
-- MATERIALIZED reads the key's row once; the second branch reads the first's copy. The guard's
-- condition is claim_read.sql's "takeable", on the row's times and the read's clock (scanRead
-- works out the same in Go): fragments.sql's "expired" and "takeover" on the read's columns.
-- Citus, whose claim has no guard (topology.go), sends claim_read.sql alone.
-- $1 tenant, $2 scope, $3 key, $4 fingerprint.
WITH r AS MATERIALIZED (
{{.Inner}}
)
SELECT * FROM r
UNION ALL
SELECT * FROM r WHERE 1 / (
	(r.expires_at <= r.now AND (r.state = {{complete}} OR (r.state = {{inFlight}} AND r.lease_expires_at <= r.now)))
	OR (r.state = {{inFlight}} AND r.lease_expires_at <= r.now AND r.same_fingerprint AND NOT r.provider_called))::int = 0
