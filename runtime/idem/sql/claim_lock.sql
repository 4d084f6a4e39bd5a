-- Transaction mode's claim on plain PostgreSQL, first of its batch: a transaction-scoped
-- advisory lock on the key (its id is a hash of the key table and the key's row). A claim held in
-- the business transaction needs no key row until its outcome: the lock is the claim, and it is
-- released by the transaction's commit or rollback, which also wakes at once whoever waits for
-- it. The row stays authoritative: the read behind the lock (claim_read.sql) decides, and the
-- completion (complete_insert.sql) writes the row only if nobody else holds or completed it, so
-- two keys whose ids collide only wait for each other and never change each other's answers.
--
-- A key with a remembered completed row takes no lock: that row is final until it expires, so
-- the read and the guard behind decide the replay (or the mismatch) without waiting for anyone,
-- and concurrent replays of one key never queue on its lock. (The NOT EXISTS names nothing of
-- the sub-selects, so PostgreSQL checks it once, before running them.)
--
-- A free lock is taken at once (pg_try_advisory_xact_lock), with no setting touched: the common
-- case, a key nobody else holds. Only a held one is waited for, and that wait is bounded by a
-- lock_timeout set for the waiting alone: the inner sub-select saves the caller's value and sets
-- the bound, the middle one takes the lock, the outer one puts the caller's value back (OFFSET 0
-- keeps each level from being merged into the next, so they run in that order; OR evaluates the
-- scalar sub-select, whose target list, unlike an EXISTS's, is kept, only when the try failed). A wait that runs out fails with lock_not_available (SQLSTATE
-- 55P03).
--
-- It is sent ahead of the BEGIN, in the implicit transaction that the BEGIN turns into the
-- business transaction, so the lock is held until the business transaction ends; when the guard
-- behind the read fails (a replay, a mismatch, a lease held), the BEGIN is skipped and the
-- implicit transaction ends with the lock: one round trip, nothing to roll back.
--
-- Advisory locks are per node: on Citus the Store claims with claim_fast.sql and claim.sql
-- instead. Through pgbouncer in transaction mode a transaction-scoped lock is as good as on a
-- direct connection.
-- It returns the claim's transaction start, for notify_locked.sql.
-- $1 the lock's id, $2 the wait's bound (a lock_timeout value, such as '50ms'); $3 tenant,
-- $4 scope, $5 key.
SELECT l.held, transaction_timestamp() FROM (
	SELECT pg_try_advisory_xact_lock($1::bigint) OR (
		SELECT set_config('lock_timeout', w.saved, true) FROM (
			SELECT v.saved, pg_advisory_xact_lock($1::bigint) FROM (
				SELECT current_setting('lock_timeout') AS saved, set_config('lock_timeout', $2::text, true) OFFSET 0
			) AS v OFFSET 0
		) AS w
	) IS NOT NULL AS held OFFSET 0
) AS l
WHERE NOT EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $3 AND k.scope = $4 AND k.key = $5 AND k.state = 'complete' AND k.expires_at > statement_timestamp()
)
