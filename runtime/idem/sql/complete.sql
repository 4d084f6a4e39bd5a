-- Completion, inside the business transaction: only the claim's owner, still in flight, may
-- store the outcome. No row updated means the lease was taken over, and the caller's
-- transaction must roll back (fencing).
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 status, $6 headers, $7 body, $8 reference,
-- $9 TTL (ms).
UPDATE {{.Table}} SET state = 'complete', status = $5, headers = $6, body = $7, reference = $8,
	completed_at = statement_timestamp(), lease_expires_at = statement_timestamp(),
	expires_at = statement_timestamp() + $9::bigint * interval '1 millisecond'
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = 'in_flight'
