-- Store.GoneKeys: keys that have history rows and no key row any more. A NULL parameter leaves
-- its condition out: the statement is sent with the simple protocol, so the planner sees the
-- values and folds the conditions that are left out away.
-- $1 key, $2 key hash, $3 tenant, $4 operation (stored forms, or NULL), $5 the most keys.
SELECT tenant, scope, key, (array_agg(operation ORDER BY at DESC))[1], min(at)
FROM {{.Events}} h
WHERE ($1::text IS NULL OR key = $1) AND ($2::text IS NULL OR {{template "keyHash"}} = $2)
	AND ($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR operation = $4)
	AND NOT EXISTS (SELECT FROM {{.Table}} k WHERE k.tenant = h.tenant AND k.scope = h.scope AND k.key = h.key)
GROUP BY tenant, scope, key
ORDER BY tenant, scope, key
LIMIT $5
