-- Purge deletes up to $1 expired rows that nobody holds, oldest first. It alone spans tenants:
-- a maintenance job, off the request path. SKIP LOCKED lets several purgers share the work.
DELETE FROM {{.Table}} AS k USING (
	SELECT tenant, scope, key FROM {{.Table}} AS k
	WHERE {{template "expired"}}
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS doomed
WHERE k.tenant = doomed.tenant AND k.scope = doomed.scope AND k.key = doomed.key
{{- define "expired"}}k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp()){{end}}
