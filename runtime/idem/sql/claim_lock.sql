-- Transaction mode's claim on plain PostgreSQL, first of its batch: a transaction-scoped
-- advisory lock on the key (its id is a hash of the key table and the key's row). A claim held in
-- the business transaction needs no key row until its outcome: the lock is the claim, and it is
-- released by the transaction's commit or rollback, which also wakes at once whoever waits for
-- it. The row stays authoritative: the read behind the lock (claim_read.sql) decides, and
-- the completion (complete_insert.sql) writes the row only if nobody else holds or completed it,
-- so two keys whose ids collide only wait for each other and never change each other's answers.
--
-- This statement only tries the lock, which a key nobody else holds (the common case: a new key,
-- or a replay) gets at once: it returns 2. A held lock is not waited for here. When the key has a
-- remembered completed row, which is final until it expires, it returns 1 with no lock taken, and
-- the read behind answers the replay (or the mismatch) without waiting for anyone; otherwise it
-- returns 0, and the Store waits for the lock in a second round trip (claim_lock_wait.sql). So the
-- claim the common case pays has neither the bounded wait's settings nor a check for a completed
-- row (the EXISTS names nothing of the outer query: PostgreSQL plans it as an initplan, run only
-- when the CASE needs it, after a failed try), and a replay of a key whose completion is visible
-- never waits on its lock: it takes the free lock until its transaction is rolled back, or reads
-- past a held one.
--
-- No answer is an error: an error costs the server far more than a statement (about 50 µs of
-- CPU for the error alone, and a line in its log with the statement's text), so no claim
-- statement fails on purpose on the paths requests take every day.
--
-- It is sent ahead of the BEGIN, in the implicit transaction that the BEGIN turns into the
-- business transaction, so the lock is held until the business transaction ends. When the read
-- behind it answers (a replay, a mismatch, a lease held), the Store rolls that transaction back,
-- which releases the lock.
--
-- Advisory locks are per node: on Citus the Store claims with claim_fast.sql and claim.sql
-- instead. Through pgbouncer in transaction mode a transaction-scoped lock is as good as on a
-- direct connection.
-- It returns the claim's transaction start, for notify_locked.sql.
-- $1 the lock's id; $2 tenant, $3 scope, $4 key.
SELECT transaction_timestamp(), CASE WHEN pg_try_advisory_xact_lock($1::bigint) THEN 2 WHEN EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $2 AND k.scope = $3 AND k.key = $4 AND k.state = 'complete' AND k.expires_at > statement_timestamp()
) THEN 1 ELSE 0 END
