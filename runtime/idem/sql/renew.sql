-- Renewal: the owner extends its lease from now (database clock) while its handler runs.
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 lease (an interval).
UPDATE {{.Table}} SET lease_expires_at = statement_timestamp() + $5::interval
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}}
RETURNING 1
