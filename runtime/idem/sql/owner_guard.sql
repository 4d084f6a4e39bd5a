-- Lease mode: a claim's batch goes on to begin the business transaction only when the claim,
-- committed just before in the same batch, made this request the key's owner. Otherwise it
-- divides by zero (SQLSTATE 22012), which skips the BEGIN behind it: a replay, an in-progress
-- answer or a mismatch leaves the connection idle, with nothing to roll back.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
SELECT 1 / (EXISTS (
	SELECT FROM {{.Table}}
	WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}}
))::int
