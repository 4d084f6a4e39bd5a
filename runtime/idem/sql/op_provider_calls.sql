-- Store.ProviderCalls, first: the provider calls of the key history made in the window [$1, $2)
-- (of the providers in $3; all when it is empty), and those with a derived key in $4 whenever
-- they were made, oldest first.
SELECT tenant, scope, key, at, operation, provider, provider_key, coalesce(amount, 0), coalesce(currency, '')
FROM {{.Events}}
WHERE kind = 'provider_call' AND provider_key IS NOT NULL
	AND ((at >= $1 AND at < $2 AND (cardinality($3::text[]) = 0 OR provider = ANY($3::text[])))
		OR provider_key = ANY($4::text[]))
ORDER BY at
