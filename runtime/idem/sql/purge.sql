-- Purge deletes up to $1 expired rows among those on the table's pages $2 up to $3: a window of
-- the heap, read by TID range scans, so the work of one statement is bounded by the window
-- however large the table, and no index on expiry is needed. It alone spans tenants: a
-- maintenance job, off the request path. On Citus every shard reads the same window of its own
-- pages. It takes no row lock of its own before the DELETE (Citus refuses FOR UPDATE on a query
-- over many shards, and plans the sub-select on its own, then deletes by the keys it found); the
-- DELETE re-checks "expired" and the window on the row's latest version, so a key that a
-- request took over (or completed) after the sub-select read it is left alone, and so is a row
-- whose latest version left the window (the next run finds it). A batch may wait for a request
-- that holds an expired key's row (a takeover in transaction mode) until it ends.
DELETE FROM {{.Table}} AS k
WHERE (k.tenant, k.scope, k.key) IN (
	SELECT tenant, scope, key FROM {{.Table}} AS k
	WHERE {{template "window"}} AND {{template "expired" "statement_timestamp()"}}
	LIMIT $1)
AND {{template "window"}} AND {{template "expired" "statement_timestamp()"}}
{{- define "window"}}k.ctid >= format('(%s,0)', $2::bigint)::tid AND k.ctid < format('(%s,0)', $3::bigint)::tid{{end}}
