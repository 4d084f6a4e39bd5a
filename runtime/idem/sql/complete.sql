-- Completion, inside the business transaction: only the claim's owner, still in flight, may
-- store the outcome. When it no longer owns the key in flight (the lease was taken over), the
-- statement fails on purpose, dividing by the zero rows it updated (SQLSTATE 22012): the
-- transaction aborts, so not even a COMMIT sent right behind it in the same batch can commit the
-- work without its outcome (fencing).
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 status, $6 headers, $7 body, $8 reference,
-- $9 TTL (an interval).
--
-- The key is remembered at least the TTL from now. The claim set its expiry to the TTL plus the
-- handler's timeout (the latest a handler can complete), so the expiry normally stays as it is:
-- no indexed column changes, and PostgreSQL can make the update a HOT update (no new entries in
-- the primary key and expiry indexes, less WAL). It moves only for a completion later than that.
--
-- A row marked by a provider call (provider_at: ProviderKey set its expiry to 'infinity' while
-- the outcome was unknown) gets the TTL from now: its expiry drops out of greatest() as NULL.
-- (Not a CASE around statement_timestamp(): Citus refuses non-IMMUTABLE functions in a CASE or
-- COALESCE of an UPDATE on a distributed table, SQLSTATE 0A000.)
--
-- It notifies nobody: a transaction that notifies takes PostgreSQL's notification queue lock
-- at its commit and keeps it until the commit is flushed, so such commits would wait for each
-- other's disk flush, one at a time. Waiting duplicates are told after the commit instead
-- (notify.sql, queued behind the COMMIT in the same batch).
WITH done AS (
	UPDATE {{.Table}} SET state = {{complete}}, status = $5, headers = $6, body = $7, reference = $8,
		completed_at = statement_timestamp(), lease_expires_at = statement_timestamp(),
		expires_at = greatest(CASE WHEN provider_at IS NULL THEN expires_at END, statement_timestamp() + $9::interval)
	WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}}
	RETURNING 1
)
SELECT 1 / count(*)::int AS owned FROM done
