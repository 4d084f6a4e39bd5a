-- complete_insert.sql for a key whose read behind the lock found a row this request may take
-- ("fresh", or an abandoned lease of the same request, as in claim_read.sql): the row is
-- rewritten with the outcome. The conflict branch re-checks that on the row's latest version: a row that
-- somebody else claimed or completed meanwhile (a lease-mode claim, which takes no advisory lock)
-- is left alone, the statement divides by the zero rows it wrote (SQLSTATE 22012), and the
-- transaction aborts with the work (fencing, as complete.sql).
-- $1 tenant, $2 scope, $3 key, $4 owner token; $5 status, $6 headers, $7 body, $8 reference,
-- $9 TTL (an interval); $10 operation, $11 fingerprint, $12 attempt.
--
-- created_at is the claim's time: the business transaction began with the claim's batch. A
-- takeover (attempt above 1) keeps the history's first claim time.
WITH done AS (
	INSERT INTO {{.Table}} AS k
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at,
			status, headers, body, reference, completed_at)
	VALUES ($1, $2, $3, $10, $11, {{complete}}, $4::uuid, statement_timestamp(), $12::int, transaction_timestamp(),
		statement_timestamp() + $9::interval, $5, $6, $7, $8, statement_timestamp())
	ON CONFLICT (tenant, scope, key) DO UPDATE SET
		(operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at,
			status, headers, body, reference, completed_at, provider_at) =
		(EXCLUDED.operation, EXCLUDED.fingerprint, EXCLUDED.state, EXCLUDED.owner_token, EXCLUDED.lease_expires_at,
			EXCLUDED.attempt, CASE WHEN EXCLUDED.attempt = 1 THEN EXCLUDED.created_at ELSE k.created_at END,
			EXCLUDED.expires_at, EXCLUDED.status, EXCLUDED.headers, EXCLUDED.body, EXCLUDED.reference, EXCLUDED.completed_at, NULL)
	WHERE {{template "expired" "statement_timestamp()"}}
		OR {{template "takeover" "statement_timestamp()"}}
	RETURNING 1
)
SELECT 1 / count(*)::int AS owned FROM done
