-- The read behind transaction mode's lock on the key (claim_lock.sql), on the common path: the
-- key's row, with what a completed row's answer needs and nothing more. Under the lock a key's row
-- is written only at its completion (complete_insert.sql), so the row a claim finds is nearly
-- always a completed one: a replay, a mismatch, or an outcome whose TTL ran out. A row in flight
-- (a lease-mode claim of the same key) is found only where both modes share a key, and the Store
-- then reads it again whole (claim_read.sql) in the transaction the batch began, for its lease,
-- its attempt and its first claim time.
--
-- Each column returned costs the server its output on every replay (about 1,800 instructions
-- for each of those three, make bench-statements), and a CASE that returned them only for rows
-- in flight cost more than it saved: PostgreSQL builds a statement's expressions each time it runs.
--
-- The columns are claim_read.sql's, in the same order, without attempt, lease_expires_at and
-- created_at; Store.scanLockedRead reads them.
-- $1 tenant, $2 scope, $3 key, $4 fingerprint.
SELECT k.fingerprint = $4 AS same_fingerprint, k.state, k.status, k.headers, k.body, k.reference,
	k.expires_at, statement_timestamp() AS now
FROM {{.Table}} AS k
WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
