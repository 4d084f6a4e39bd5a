-- Purge deletes up to $1 expired rows, oldest first. It alone spans tenants: a maintenance job,
-- off the request path. It takes no row lock of its own before the DELETE (Citus refuses FOR
-- UPDATE on a query over many shards, and plans the sub-select on its own, then deletes by the
-- keys it found); the DELETE re-checks "expired" on the row's latest version, so a key that a
-- request took over (or completed) after the sub-select read it is left alone. A batch may wait
-- for a request that holds an expired key's row (a takeover in transaction mode) until it ends.
DELETE FROM {{.Table}} AS k
WHERE (k.tenant, k.scope, k.key) IN (
	SELECT tenant, scope, key FROM {{.Table}} AS k
	WHERE {{template "expired"}}
	ORDER BY expires_at LIMIT $1)
AND {{template "expired"}}
{{- define "expired"}}k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp()){{end}}
