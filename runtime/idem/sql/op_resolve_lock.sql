-- Store.ResolveTx, first: the key's row, locked for the rest of the caller's transaction so that
-- two operators (or an operator and a reconciliation) cannot settle one key twice. The caller
-- refuses a key that is not uncertain.
-- $1 tenant, $2 scope, $3 key.
SELECT state, operation FROM {{.Table}} WHERE tenant = $1 AND scope = $2 AND key = $3 FOR UPDATE
