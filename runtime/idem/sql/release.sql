-- Release: the owner gives the key back after its work rolled back, so a retry executes anew.
-- A row taken over by another request, or completed, is left alone.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
DELETE FROM {{.Table}}
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = 'in_flight'
