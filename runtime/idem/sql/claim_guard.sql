-- The claim's guard, between its read (claim_read.sql) and its write (claim.sql): when the
-- key has a row nobody may take, it divides by zero (SQLSTATE 22012), which skips the rest of
-- the batch: the read's row is then the answer. Without such a row it returns 1 and the write
-- decides. The read and the guard see the row at different instants: when they disagree (the
-- read found it takeable, the guard not), the caller claims again.
-- $1 tenant, $2 scope, $3 key, $4 fingerprint.
SELECT 1 / (NOT EXISTS (
	SELECT FROM {{.Table}} AS k
	WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
		AND NOT ((k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp()))
			OR (k.state = 'in_flight' AND k.lease_expires_at <= statement_timestamp() AND k.fingerprint = $4))
))::int
