-- Store.ResolveTx as completed: the lost attempt took effect; the key stores the outcome given,
-- which every retry replays, for the TTL given. The row was locked by op_resolve_lock.sql and
-- found uncertain in the same transaction.
-- $1 tenant, $2 scope, $3 key, $4 status, $5 headers, $6 body, $7 reference, $8 TTL. It returns
-- a row when it settled the key (Store.apply counts it).
UPDATE {{.Table}} SET state = {{complete}}, status = $4, headers = $5, body = $6, reference = $7,
	completed_at = statement_timestamp(), expires_at = statement_timestamp() + $8::interval
WHERE tenant = $1 AND scope = $2 AND key = $3
RETURNING 1
