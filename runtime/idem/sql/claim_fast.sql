-- The claim's fast path, for the common case: a key nobody has. A plain insert wins it; when the
-- key has a row, whatever its state, it inserts nothing and returns no row, and
-- the caller sends the full claim (claim.sql), which alone reads a row, takes one over or tells
-- a different request from a duplicate. So the takeover and mismatch logic costs only the
-- requests that need it. Ownership is decided by the insert alone, as its RETURNING says (never
-- by its command tag: Citus reports INSERT 0 1 for an INSERT … SELECT … ON CONFLICT DO NOTHING
-- that inserted nothing): a row returned here is new, in flight, and this request's (attempt 1).
--
-- Parameters as claim.sql's: $1 tenant, $2 scope, $3 key, $4 owner token, $5 operation,
-- $6 fingerprint, $7 lease (an interval), $8 TTL (an interval). It is a VALUES insert that leads
-- with the tenant, with no sub-select and no DO UPDATE, so Citus routes it to the tenant's shard,
-- and its statement_timestamp() calls are in VALUES, which Citus evaluates on the coordinator.
--
-- What the claim's own transaction needs besides (lease mode's synchronous_commit off,
-- transaction mode's lock_timeout restored) is set by statements of its own in the same batch:
-- a set_config here would run on the worker.
INSERT INTO {{.Table}}
	(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
VALUES ($1, $2, $3, $5, $6, {{inFlight}}, $4::uuid,
	statement_timestamp() + $7::interval, 1, statement_timestamp(),
	statement_timestamp() + $8::interval)
ON CONFLICT (tenant, scope, key) DO NOTHING
RETURNING 1
