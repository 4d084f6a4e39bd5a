-- Store.ProviderCalls, last: the calls' key rows that still exist (a key row has the last word
-- on its state). $1, $2, $3 as in op_key_fates.sql.
SELECT t.tenant, t.scope, t.key, t.state, coalesce(t.status, 0)
FROM {{.Table}} t JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, scope, key)
	ON t.tenant = k.tenant AND t.scope = k.scope AND t.key = k.key
