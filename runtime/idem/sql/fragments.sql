-- Fragments the statements share, defined once (sql.go parses this file ahead of each statement).
--
-- "expired" is a key row (alias k) whose history is over as of the time given as the template's
-- argument (statement_timestamp(), or the claim's own time, EXCLUDED.created_at): its TTL has run
-- out and nobody holds it (it completed, or its holder's lease ran out). Such a row behaves as a
-- new key ("fresh" in claim_read.sql), and Purge deletes it. An uncertain row is never expired,
-- whatever its expiry says: it waits for Store.Resolve (its expiry is 'infinity' anyway).
{{define "expired"}}(k.expires_at <= {{.}} AND (k.state = {{complete}} OR (k.state = {{inFlight}} AND k.lease_expires_at <= {{.}}))){{end}}

-- "takeover" is a key row (alias k) abandoned by its holder as of the time given as the
-- template's argument, which the request being inserted (EXCLUDED) may take over: in flight, its
-- lease run out, the same request (fingerprint), and no provider call recorded on it
-- (provider_at, set by ProviderKey under DoParams.UncertainOnLoss). A row whose holder called a
-- provider is never taken over: the claim that finds it abandoned turns it uncertain instead
-- (uncertain_abandoned.sql). claim_read_guarded.sql's guard says the same on the read's columns.
{{define "takeover"}}(k.state = {{inFlight}} AND k.lease_expires_at <= {{.}} AND k.fingerprint = EXCLUDED.fingerprint AND k.provider_at IS NULL){{end}}

-- "keyHash" is Go's KeyHash computed by PostgreSQL from a row's scope and key (sha256 is built in
-- since PostgreSQL 11), so that a hash from a log line finds its row without storing the hash.
-- A column in the stored form (storedText in scope.go) is turned back into the bytes the runtime
-- hashed: an escaped value is hex after U+0001, anything else is text, whose UTF-8 bytes
-- convert_to yields whatever the server's encoding.
{{define "keyHash"}}left(encode(sha256((CASE WHEN left(scope, 1) = chr(1) THEN decode(substr(scope, 2), 'hex') ELSE convert_to(scope, 'UTF8') END) || '\x00'::bytea || (CASE WHEN left(key, 1) = chr(1) THEN decode(substr(key, 2), 'hex') ELSE convert_to(key, 'UTF8') END)), 'hex'), 16){{end}}
