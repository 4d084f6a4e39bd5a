-- Completion of a claim made under the key's advisory lock (claim_lock.sql), inside the business
-- transaction, when the read behind the lock found no row: the key's row is written once, with
-- the outcome (a row the read found is rewritten by complete_takeover.sql instead). A row that
-- somebody else inserted meanwhile (a lease-mode claim, which takes no advisory lock) makes it
-- fail with unique_violation (SQLSTATE 23505) on the key table: the transaction aborts with the
-- work (fencing, as complete.sql), and the Store reads that error as the claim lost.
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 status, $6 headers, $7 body, $8 reference,
-- $9 TTL (an interval); $10 operation, $11 fingerprint, $12 attempt (1).
--
-- created_at is the claim's time: the business transaction began with the claim's batch.
INSERT INTO {{.Table}}
	(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at,
		status, headers, body, reference, completed_at)
VALUES ($1, $2, $3, $10, $11, {{complete}}, $4::uuid, statement_timestamp(), $12::int, transaction_timestamp(),
	statement_timestamp() + $9::interval, $5, $6, $7, $8, statement_timestamp())
