-- notify.sql for a claim made under the key's advisory lock (claim_lock.sql), sent behind the
-- COMMIT: its duplicates wait on the lock itself, and the commit that released it woke them. Only
-- a duplicate whose bounded wait on the lock ran out sleeps until a notification, and a wait
-- runs out only after a waiter has waited at least $4 ms (Store.claimLocked), unless the
-- waiter's own wait was about to end anyway. So it notifies only when the lock was held that
-- long: from the claim's transaction start ($3, at or before the lock was granted) until now
-- (after the commit released it), as the database's clock measures both. Otherwise it sends
-- nothing, and its implicit transaction writes nothing and commits nothing.
-- $1 channel, $2 payload, $3 the claim's transaction start, $4 the shortest wait (an interval).
SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)
WHERE clock_timestamp() - $3::timestamptz >= $4::interval
