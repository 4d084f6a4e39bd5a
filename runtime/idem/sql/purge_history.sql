-- Purge's batch on the history: up to $1 rows older than $2 (now minus
-- Config.HistoryRetention). The sub-select finds them by the BRIN index on at (the table is
-- appended in time order); the DELETE names them by key and time, which Citus routes to each
-- shard, and re-checks their age.
DELETE FROM {{.Events}} AS h
WHERE (h.tenant, h.scope, h.key, h.at) IN (
	SELECT tenant, scope, key, at FROM {{.Events}} WHERE at < $2::timestamptz LIMIT $1)
AND h.at < $2::timestamptz
