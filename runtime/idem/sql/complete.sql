-- Completion, inside the business transaction: only the claim's owner, still in flight, may
-- store the outcome. When it no longer owns the key in flight (the lease was taken over), the
-- statement fails on purpose, dividing by the zero rows it updated (SQLSTATE 22012): the
-- transaction aborts, so not even a COMMIT sent right behind it in the same batch can commit the
-- work without its outcome (fencing).
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 status, $6 headers, $7 body, $8 reference,
-- $9 TTL (ms); $10 the channel duplicates waiting for this key listen on, or '' when none may
-- wait, $11 the key's notification payload (a hash: it never reveals the key).
--
-- The notification is part of the transaction, so it is delivered when the outcome commits, and
-- never when it rolls back. A transaction that notifies takes PostgreSQL's notification queue
-- lock at commit, which serialises such commits: only operations whose duplicates wait send one.
WITH done AS (
	UPDATE {{.Table}} SET state = 'complete', status = $5, headers = $6, body = $7, reference = $8,
		completed_at = statement_timestamp(), lease_expires_at = statement_timestamp(),
		expires_at = statement_timestamp() + $9::bigint * interval '1 millisecond'
	WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = 'in_flight'
	RETURNING 1
)
SELECT CASE WHEN $10::text <> '' THEN pg_notify($10, $11::text) END,
	1 / (SELECT count(*) FROM done)::int AS owned
