-- Store.ResolveTx as failed: the lost attempt took no effect; the key is given back, and the next
-- retry runs anew. The row was locked and found uncertain, as for op_resolve_completed.sql.
-- $1 tenant, $2 scope, $3 key. It returns a row when it settled the key (Store.apply counts it).
DELETE FROM {{.Table}} WHERE tenant = $1 AND scope = $2 AND key = $3
RETURNING 1
