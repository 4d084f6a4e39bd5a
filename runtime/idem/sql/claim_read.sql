-- The claim: its read (this file, sent with its guard as claim_read_guarded.sql) and its write
-- (claim.sql) decide all five outcomes (acquired, taken over, replayed, in progress, key reused)
-- in one round trip. Transaction mode's claim under the key's advisory lock (claim_lock.sql)
-- sends this file alone behind the lock, and Citus, which sends no guard, too.
--
-- The read: the key's row as this statement sees it, with what the answer needs
-- when nobody may take it (the common duplicate: in flight, completed, or a different request).
-- Such a row is the answer, and the guard (claim_read_guarded.sql) skips the write: replays
-- and in-progress answers are plain reads.
--
-- A row is "fresh" (behaves as a new key) when its TTL has run out and nobody holds it; it is
-- "takeable" when it is fresh, or its holder's lease ran out on the same request. The
-- fingerprint condition means a different request can never take over a live key's history.
--
-- Besides the row, it returns how long the holder's lease has left and how long the key has been
-- in flight (since created_at, the first claim of its history), for an honest Retry-After, and
-- how long a completed row stays remembered (for the replay cache), and whether the row is fresh
-- (a takeover's attempt number starts again at 1).
--
-- $1 tenant, $2 scope, $3 key, $4 fingerprint.
{{define "fresh"}}(k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp())){{end -}}
SELECT k.attempt, k.fingerprint = $4 AS same_fingerprint, k.state, k.status, k.headers, k.body, k.reference,
	greatest(0, ceil(extract(epoch FROM k.lease_expires_at - statement_timestamp()) * 1000))::bigint AS lease_left_ms,
	greatest(0, floor(extract(epoch FROM statement_timestamp() - k.created_at) * 1000))::bigint AS held_ms,
	greatest(0, floor(extract(epoch FROM k.expires_at - statement_timestamp()) * 1000))::bigint AS expires_left_ms,
	({{template "fresh"}} OR (k.state = 'in_flight' AND k.lease_expires_at <= statement_timestamp() AND k.fingerprint = $4)) AS takeable,
	{{template "fresh"}} AS fresh
FROM {{.Table}} AS k
WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
