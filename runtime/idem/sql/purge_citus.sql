-- Purge's batch on Citus: sql/purge.sql without the window on the DELETE itself, which Citus
-- refuses ("recursively planned distributed modifications with ctid on where clause are not
-- supported"). The sub-select still reads one window of pages on every shard and finds at most
-- $1 expired keys; each shard then deletes those of its own by the primary key, re-checking
-- "expired" on the row's latest version.
DELETE FROM {{.Table}} AS k
WHERE (k.tenant, k.scope, k.key) IN (
	SELECT tenant, scope, key FROM {{.Table}} AS k
	WHERE k.ctid >= format('(%s,0)', $2::bigint)::tid AND k.ctid < format('(%s,0)', $3::bigint)::tid
		AND {{template "expired" "statement_timestamp()"}}
	LIMIT $1)
AND {{template "expired" "statement_timestamp()"}}
