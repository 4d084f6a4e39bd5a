-- Store.LookupKey and Store.ListKeys: key rows as support sees them. A NULL parameter leaves its
-- condition out: the statement is sent with the simple protocol, so the planner sees the values
-- and folds away the conditions left out (a lookup by tenant and key then reads the primary key).
-- $1 read the body, $2 key, $3 key hash, $4 tenant, $5 operation (stored forms), $6 state,
-- $7 stale only, $8 created at or after, $9 newest first (else by tenant, operation, scope),
-- $10 the most rows.
SELECT tenant, scope, key, operation, fingerprint, state, attempt, status, reference, headers,
	coalesce(octet_length(body), 0), CASE WHEN $1::boolean THEN body END,
	created_at, completed_at, expires_at, lease_expires_at, statement_timestamp()
FROM {{.Table}}
WHERE ($2::text IS NULL OR key = $2) AND ($3::text IS NULL OR {{template "keyHash"}} = $3)
	AND ($4::text IS NULL OR tenant = $4) AND ($5::text IS NULL OR operation = $5)
	AND ($6::text IS NULL OR state = $6) AND (NOT $7::boolean OR lease_expires_at <= statement_timestamp())
	AND ($8::timestamptz IS NULL OR created_at >= $8)
ORDER BY CASE WHEN $9::boolean THEN created_at END DESC, tenant, operation, scope, key
LIMIT $10
