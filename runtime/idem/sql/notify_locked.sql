-- notify.sql for a claim made under the key's advisory lock (claim_lock.sql), sent behind the
-- COMMIT: its duplicates wait on the lock itself, and the commit that released it woke them. Only
-- a duplicate whose bounded wait on the lock ran out sleeps until a notification, and a wait
-- runs out only after a waiter has waited at least $3 (Store.claimLocked), unless the waiter's
-- own wait was about to end anyway. So it notifies only when the lock was held that long: from
-- the claim's transaction start until now (after the commit released it), as the database's
-- clock measures both.
--
-- The claim's transaction start is the key row's created_at, which the completion just committed:
-- complete_insert.sql writes the business transaction's start there, and so does
-- complete_takeover.sql for a fresh history, the transaction the lock statement began. A takeover
-- of an abandoned claim keeps the history's first claim time, earlier: the hold then looks
-- longer, and the duplicates get a notification they may not need, never one less. Reading it
-- here, on the rare long hold (the Store sends this statement only when the handler ran for half
-- the wait or more), spares every claim returning its transaction's start. Without the row (an
-- operator deleted it meanwhile) nothing is sent, and a sleeping duplicate wakes at its poll.
-- Otherwise it sends nothing either, and its implicit transaction writes nothing and commits
-- nothing.
-- $1 channel, $2 payload, $3 the shortest wait (an interval), $4 tenant, $5 scope, $6 key.
SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)
FROM {{.Table}} AS k
WHERE k.tenant = $4 AND k.scope = $5 AND k.key = $6 AND clock_timestamp() - k.created_at >= $3::interval
