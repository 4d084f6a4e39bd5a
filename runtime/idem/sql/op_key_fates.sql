-- Store.ProviderCalls, then: what became of the calls' keys, from their history: each key's
-- completions, releases, turns to uncertain and resolutions, oldest first (the last one tells).
-- $1, $2, $3: the keys' tenants, scopes and keys (stored forms), one key per index.
SELECT e.tenant, e.scope, e.key, e.kind, coalesce(e.status, 0), coalesce(e.resolution, '')
FROM {{.Events}} e JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, scope, key)
	ON e.tenant = k.tenant AND e.scope = k.scope AND e.key = k.key
WHERE e.kind IN ({{event "completed"}}, {{event "released"}}, {{event "uncertain"}}, {{event "resolved"}})
ORDER BY e.at
