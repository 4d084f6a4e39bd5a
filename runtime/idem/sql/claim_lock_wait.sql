-- Transaction mode's lock on the key when claim_lock.sql found it held by somebody else and the
-- key had no remembered completed row: the contended claim (a duplicate of a key in flight,
-- mostly), in its own round trip, behind the ROLLBACK of the first round trip's transaction and
-- followed by the read (claim_read.sql). It waits for the holder, whose commit or rollback wakes
-- it at once; the read then sees what the holder left, which answers the duplicate (a replay,
-- mostly). Nothing begins behind it: the lock ends with the round trip's implicit transaction, and
-- when the holder left nothing (it rolled back), the Store claims again from claim_lock.sql.
--
-- The wait is bounded by a lock_timeout set for the waiting alone: the inner sub-select saves the
-- caller's value and sets the bound, the middle one takes the lock, the outer one puts the
-- caller's value back (OFFSET 0 keeps each level from being merged into the next, so they run in
-- that order; OR evaluates the scalar sub-select only when the try failed: a lock freed since is
-- taken with no setting touched). A wait that runs out fails with lock_not_available (SQLSTATE
-- 55P03).
--
-- It returns whether the lock was free.
-- $1 the lock's id, $2 the wait's bound (a lock_timeout value, such as '50ms').
SELECT l.held FROM (
	SELECT pg_try_advisory_xact_lock($1::bigint) OR (
		SELECT set_config('lock_timeout', w.saved, true) FROM (
			SELECT v.saved, pg_advisory_xact_lock($1::bigint) FROM (
				SELECT current_setting('lock_timeout') AS saved, set_config('lock_timeout', $2::text, true) OFFSET 0
			) AS v OFFSET 0
		) AS w
	) IS NOT NULL AS held OFFSET 0
) AS l
