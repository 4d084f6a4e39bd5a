-- Store.ResolveTx's row of the key's history: who settled the key, how (the resolution column,
-- completed or failed), why (detail: the evidence) and, resolved as completed, the status stored.
-- $1 tenant, $2 scope, $3 key, $4 operation (stored form), $5 status (0: none), $6 evidence,
-- $7 actor, $8 resolution.
INSERT INTO {{.Events}} (tenant, scope, key, kind, operation, status, detail, actor, resolution)
VALUES ($1, $2, $3, {{event "resolved"}}, $4, NULLIF($5, 0), $6, $7, $8)
