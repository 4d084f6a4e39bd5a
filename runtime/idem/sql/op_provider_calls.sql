-- Store.EachProviderCall over a window: the provider calls of the key history made in [$1, $2),
-- of the providers in $3 (all when it is empty), by derived key and time, so that the calls of
-- one derived key come together.
SELECT tenant, scope, key, at, operation, provider, provider_key, coalesce(amount, 0), coalesce(currency, '')
FROM {{.Events}}
WHERE kind = {{event "provider_call"}} AND provider_key IS NOT NULL
	AND at >= $1 AND at < $2 AND (cardinality($3::text[]) = 0 OR provider = ANY($3::text[]))
ORDER BY provider_key, at
