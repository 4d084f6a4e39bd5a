-- The history's row of a lease-mode claim (DoParams.History): queued right behind the claim's
-- write, in the claim's own transaction, so it commits (asynchronously, as the claim does) with
-- the claim or not at all. It needs no answer from the claim: it copies the key's row only when
-- that row is in flight under this request's token, that is when the claim inserted or took
-- over the key; otherwise it inserts nothing. attempt 1 is an acquisition, a later one a takeover.
--
-- On Citus both tables are distributed by tenant and co-located, and the statement names the
-- tenant, so Citus pushes it down to the tenant's shard: one task, on the worker the claim's
-- write went to, in the claim's transaction there (no two-phase commit). Citus pushes an
-- INSERT … SELECT down only when nothing in it is volatile, the defaults of the columns it
-- leaves out included: the history's at defaults to clock_timestamp(), so the statement gives at
-- itself, as statement_timestamp() (stable). Left to its default, the SELECT ran on the worker,
-- its rows came back to the coordinator and were copied to the shard on a connection of their
-- own: two connections to the worker in one transaction, a PREPARE TRANSACTION on every claim.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
INSERT INTO {{.Events}} (tenant, scope, key, at, kind, operation, attempt)
SELECT k.tenant, k.scope, k.key, statement_timestamp(), CASE WHEN k.attempt = 1 THEN 'acquired' ELSE 'taken_over' END, k.operation, k.attempt
FROM {{.Table}} AS k
WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3 AND k.owner_token = $4::uuid AND k.state = {{inFlight}}
