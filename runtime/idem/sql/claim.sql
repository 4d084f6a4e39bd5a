-- The claim's write: it inserts the key in flight, or takes over a row nobody may keep (see
-- claim_read.sql for "fresh" and "takeable"). It is sent behind the claim's guarded read
-- (claim_read_guarded.sql), which fails when the row is there and nobody may take it, so a replay, an
-- in-progress answer or a mismatch never writes or locks anything. (On Citus the Store sends no
-- guard, see topology.go: the write then runs, and for such a row its WHERE writes nothing.)
--
-- Parameters as every claim's: $1 tenant, $2 scope, $3 key, $4 owner token; then $5 operation,
-- $6 fingerprint, $7 lease (an interval), $8 TTL (an interval).
--
-- It is a VALUES insert with no sub-select and nothing volatile outside VALUES, which is what
-- Citus routes to the tenant's shard as one statement: the time is read once, in VALUES, and the
-- conflict branch compares against it through EXCLUDED.created_at (the new row's claim time,
-- "now"). The conflict check locks the row and re-evaluates "takeable" on its latest version,
-- so two racing takeovers cannot both win; RETURNING yields a row only when this request
-- inserted the key or took it over, and nothing when the row turned out to be someone's (the
-- caller then claims again, and the read sees who holds it).
INSERT INTO {{.Table}} AS k
	(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
VALUES ($1, $2, $3, $5, $6, {{inFlight}}, $4::uuid,
	statement_timestamp() + $7::interval, 1, statement_timestamp(),
	statement_timestamp() + $8::interval)
ON CONFLICT (tenant, scope, key) DO UPDATE SET
	(operation, fingerprint, state, owner_token, lease_expires_at, expires_at, attempt, created_at,
		status, headers, body, reference, completed_at, provider_at) =
	(EXCLUDED.operation, EXCLUDED.fingerprint, EXCLUDED.state, EXCLUDED.owner_token,
		EXCLUDED.lease_expires_at, EXCLUDED.expires_at,
		-- a fresh history when the old one expired
		CASE WHEN {{template "expired" "EXCLUDED.created_at"}} THEN 1 ELSE k.attempt + 1 END,
		CASE WHEN {{template "expired" "EXCLUDED.created_at"}} THEN EXCLUDED.created_at ELSE k.created_at END,
		NULL, NULL, NULL, NULL, NULL, NULL)
WHERE {{template "expired" "EXCLUDED.created_at"}}
	OR {{template "takeover" "EXCLUDED.created_at"}}
RETURNING attempt
