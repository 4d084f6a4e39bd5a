-- Store.History: a key's history, oldest first, its newest rows when it has more than the limit.
-- $1 tenant, $2 scope, $3 key (stored forms), $4 the most rows.
SELECT at, kind, operation, coalesce(attempt, 0), coalesce(status, 0), coalesce(detail, ''),
	coalesce(actor, ''), coalesce(replays, 0), coalesce(provider, ''), coalesce(provider_key, ''),
	coalesce(amount, 0), coalesce(currency, ''), coalesce(resolution, '')
FROM (SELECT * FROM {{.Events}} WHERE tenant = $1 AND scope = $2 AND key = $3 ORDER BY at DESC LIMIT $4) h
ORDER BY at
