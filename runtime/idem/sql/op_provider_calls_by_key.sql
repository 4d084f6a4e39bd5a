-- Store.EachProviderCall by derived key: the provider calls with a derived key in $1, whenever
-- they were made and whatever their provider (the history's index on provider_key), by derived
-- key and time.
SELECT tenant, scope, key, at, operation, provider, provider_key, coalesce(amount, 0), coalesce(currency, '')
FROM {{.Events}}
WHERE kind = {{event "provider_call"}} AND provider_key = ANY($1::text[])
ORDER BY provider_key, at
