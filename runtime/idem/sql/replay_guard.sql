-- The replay check's guard (see replay.sql): when the key has a remembered completed row, it
-- divides by zero (SQLSTATE 22012), which skips the rest of the batch, the BEGIN included.
-- Without one it returns 1 and the batch goes on to claim.
-- $1 tenant, $2 scope, $3 key.
SELECT 1 / (NOT EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3 AND k.state = {{complete}} AND k.expires_at > statement_timestamp()
))::int
