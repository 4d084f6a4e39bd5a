-- The replay check's guard (see replay.sql): when the key has a remembered completed row, it
-- divides by zero (SQLSTATE 22012), which skips the rest of the batch, the BEGIN included.
-- Without one it returns 1 and the batch goes on to claim.
--
-- In transaction mode (Lock) it also bounds the claim's wait for a concurrent holder: it saves
-- the caller's lock_timeout and sets the claim's, locally, as the claim batch does without a
-- replay check. Set before the BEGIN in the same batch, these still belong to the transaction
-- the BEGIN opens (the statements before it run in that same transaction), and end with it; a
-- guard that fails takes them back with it. Lease mode's claim commits at once and waits for no
-- holder's transaction, so its guard sets nothing.
-- $1 tenant, $2 scope, $3 key; with Lock, $4 the claim's lock_timeout.
SELECT {{if .Lock}}set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $4, true),
	{{end}}1 / (NOT EXISTS (
		SELECT FROM {{.Table}} AS k
		WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3 AND k.state = 'complete' AND k.expires_at > statement_timestamp()
	))::int
