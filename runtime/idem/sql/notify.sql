-- Tells the duplicates waiting for a key that it is free or completed, in a transaction of its
-- own that does not wait for its flush to disk: a notification is not durable anyway, and what
-- it announces committed before it was sent. So the notification queue lock is held only
-- briefly, and notifying commits never queue behind each other's flush.
-- $1 the channel waiting duplicates listen on, $2 the key's payload (a hash: it never reveals the key).
SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)
