-- A claim found the key in flight, its holder's lease run out after a provider call
-- (provider_at): the holder is gone (a crash, a partition), and the provider may have acted, so
-- the key turns uncertain instead of being taken over. Fenced by the attempt the claim's read
-- saw and by the conditions themselves, re-checked on the row's latest version: a holder that
-- renewed its lease meanwhile keeps its key, and of many claims racing here one alone turns the
-- key (the others return nothing and claim again, and find it uncertain).
-- $1 tenant, $2 scope, $3 key, $4 the attempt the read saw.
UPDATE {{.Table}} SET state = {{uncertain}}, expires_at = 'infinity'
WHERE tenant = $1 AND scope = $2 AND key = $3 AND attempt = $4::int AND state = {{inFlight}}
	AND provider_at IS NOT NULL AND lease_expires_at <= statement_timestamp()
RETURNING operation
