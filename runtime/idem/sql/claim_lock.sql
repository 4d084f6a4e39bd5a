-- Transaction mode's claim on plain PostgreSQL, first of its batch: a transaction-scoped
-- advisory lock on the key (its id is a hash of the key table and the key's row). A claim held in
-- the business transaction needs no key row until its outcome: the lock is the claim, and it is
-- released by the transaction's commit or rollback, which also wakes at once whoever waits for
-- it. The row stays authoritative: the read behind the lock (claim_read.sql) decides, and
-- the completion (complete_insert.sql) writes the row only if nobody else holds or completed it,
-- so two keys whose ids collide only wait for each other and never change each other's answers.
--
-- This statement only tries the lock, which a new key nobody else holds (the common case) gets at
-- once; a held lock is not waited for here. The read behind it (claim_read.sql) decides what a
-- held lock means: a remembered completed row is final until it expires, so it answers the
-- replay (or the mismatch) without waiting for anyone; any other row, or none, makes the Store
-- wait for the lock in a second round trip (claim_lock_wait.sql). So the claim the common case
-- pays has neither the bounded wait's settings nor anything else.
--
-- A key whose completed row is final is not locked at all (no row is returned): its claim is a
-- replay or a mismatch, which the read answers, and the transaction the batch began for it is
-- rolled back only with the connection's next batch (owed.go), up to 20 ms later. Holding the
-- key's lock that long made every duplicate of a storm that was still waiting for the first
-- holder (claim_lock_wait.sql) wait for that replay's rollback too: 20 ms more at the tail of a
-- storm. The check is the key's primary-key probe, which the read behind repeats from the
-- same pages. It is not free: make bench-statements put this statement at 54k instructions for
-- a new key and 49k for a replay, where the bare lock was 20k (about 6% of a first execution's
-- work in PostgreSQL, a quarter of a replay's). Rolling the owed transactions back as soon as a
-- duplicate waits would cost nothing on the common paths, but only for the owed transactions
-- of the same process: a replica's replay would still hold the lock for a duplicate that
-- another replica serves.
--
-- No answer is an error: an error costs the server far more than a statement (about 50 µs of
-- CPU for the error alone, and a line in its log with the statement's text), so no claim
-- statement fails on purpose on the paths requests take every day.
--
-- It is sent ahead of the BEGIN, in the implicit transaction that the BEGIN turns into the
-- business transaction, so the lock is held until the business transaction ends. When the read
-- behind it answers (a replay, a mismatch, a lease held), the Store rolls that transaction back,
-- which releases the lock. The read is a statement of its own, after this one, so that its
-- snapshot is taken once the lock is held and sees whatever the lock's last holder committed.
--
-- Advisory locks are per node: on Citus the Store claims with claim_fast.sql and claim.sql
-- instead. Through pgbouncer in transaction mode a transaction-scoped lock is as good as on a
-- direct connection.
-- It returns whether it took the lock, and nothing else: each column costs the server its output
-- on every claim (the transaction's start, which notify_locked.sql needs after a long hold, cost
-- about 2,600 instructions per request here; that statement reads it from the key's row).
-- $1 tenant, $2 scope, $3 key, $4 the lock's id.
SELECT pg_try_advisory_xact_lock($4::bigint)
WHERE NOT EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
		AND k.state = 'complete' AND k.expires_at > statement_timestamp()
)
