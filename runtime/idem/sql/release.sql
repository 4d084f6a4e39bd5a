-- Release: the owner gives the key back after its work rolled back, so a retry executes anew.
-- A row taken over by another request, or completed, is left alone. A row deleted (returned) means it was
-- this request's; the caller then tells the waiting duplicates (notify.sql) in a statement of
-- its own, which touches no table: on Citus this one runs on the tenant's shard, and a NOTIFY
-- sent there would reach nobody (the listeners are connected to the coordinator).
-- A row marked by a provider call (provider_at) is never deleted: the provider may have acted,
-- and a retry must not run again. The Store turns it uncertain instead (uncertain_held.sql); if
-- the mark committed after the Store looked, the row stays in flight, and the claim that finds
-- its lease run out turns it uncertain.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
DELETE FROM {{.Table}}
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}} AND provider_at IS NULL
RETURNING 1
