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
-- Besides the row it returns the row's times and the statement's own clock (now), from which
-- the Store works out how long the holder's lease has left and how long the key has been in
-- flight (since created_at, the first claim of its history), for an honest Retry-After, how long
-- a completed row stays remembered (for the replay cache), and whether the row is fresh (a
-- takeover's attempt number starts again at 1) or takeable. The columns are the row's own, with
-- no expression but the fingerprint's comparison: PostgreSQL builds a statement's expressions
-- each time it runs it, and the arithmetic on times that used to be here cost more than reading
-- the row (scanRead does it instead, on the same clock). claim_read_guarded.sql works out
-- "takeable" from these columns for its guard.
--
-- provider_called says the holder asked for a provider key under DoParams.UncertainOnLoss
-- (provider_at): such a row is never taken over, and a claim that finds its lease run out turns
-- it uncertain (uncertain_abandoned.sql). state 'uncertain' is answered ErrUncertain.
--
-- $1 tenant, $2 scope, $3 key, $4 fingerprint.
SELECT k.attempt, k.fingerprint = $4 AS same_fingerprint, k.state, k.status, k.headers, k.body, k.reference,
	k.lease_expires_at, k.created_at, k.expires_at, statement_timestamp() AS now,
	k.provider_at IS NOT NULL AS provider_called
FROM {{.Table}} AS k
WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
