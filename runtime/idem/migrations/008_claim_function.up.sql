-- Lease mode's fast claim as one function on the server (sql/claim_fast_lease.sql calls it): the
-- replay check, and only for a key without a remembered completed row the insert that wins it.
-- As two statements in one batch, both ran for every request: a replay paid for an insert that
-- could not win (PostgreSQL sets up an INSERT … ON CONFLICT's whole plan, its indexes and its
-- arbiter each time it runs one), and a new key for a read that found nothing. In a function
-- each statement runs only when it is reached, from a plan PL/pgSQL keeps for the session.
--
-- One row always: won is true when this request inserted the key (in flight, attempt 1, its
-- owner token); false with the row's columns for a remembered completed row (a replay, or key
-- reused: the caller compares the fingerprint); false with NULLs for any other row (in flight,
-- expired, uncertain), which the full claim decides. The read and the insert each take their
-- own snapshot (the function is VOLATILE), as the two statements did: a row inserted or
-- completed between them makes the insert write nothing, and the full claim reads it.
--
-- The insert also turns off synchronous_commit for the claim's own transaction (Store.claim
-- says why that loses nothing), until its COMMIT; a replay changes no setting.
--
-- Every name in the body is qualified, or is PostgreSQL's own (pg_catalog is searched first
-- whatever the caller's search_path), and the function runs with its caller's rights.
-- Parameters as every claim's: tenant, scope, key, owner token, operation, fingerprint, the
-- lease and the expiry (intervals).
CREATE FUNCTION {{.ClaimLease}}(
	p_tenant text, p_scope text, p_key text, p_token uuid, p_operation text, p_fingerprint text,
	p_lease interval, p_ttl interval,
	OUT won boolean, OUT fingerprint text, OUT status integer, OUT headers jsonb, OUT body bytea,
	OUT reference text, OUT expires_at timestamptz, OUT now timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
	won := false;
	now := statement_timestamp();
	SELECT k.fingerprint, k.status, k.headers, k.body, k.reference, k.expires_at
	INTO fingerprint, status, headers, body, reference, expires_at
	FROM {{.Table}} AS k
	WHERE k.tenant = p_tenant AND k.scope = p_scope AND k.key = p_key
		AND k.state = {{complete}} AND k.expires_at > now;
	IF FOUND THEN
		RETURN;
	END IF;
	PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
	INSERT INTO {{.Table}}
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
	VALUES (p_tenant, p_scope, p_key, p_operation, p_fingerprint, {{inFlight}}, p_token,
		now + p_lease, 1, now, now + p_ttl)
	ON CONFLICT (tenant, scope, key) DO NOTHING;
	won := FOUND;
END
$fn$;
