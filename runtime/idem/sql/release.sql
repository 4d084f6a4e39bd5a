-- Release: the owner gives the key back after its work rolled back, so a retry executes anew.
-- A row taken over by another request, or completed, is left alone.
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 the channel waiting duplicates listen on, or ''
-- when none may wait, $6 the key's notification payload. A row returned means it was deleted.
WITH gone AS (
	DELETE FROM {{.Table}}
	WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = 'in_flight'
	RETURNING 1
)
SELECT CASE WHEN $5::text <> '' THEN pg_notify($5, $6::text) END FROM gone
