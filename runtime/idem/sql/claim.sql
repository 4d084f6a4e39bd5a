-- The claim: one statement and one round trip for all five outcomes (acquired, taken over,
-- replayed, in progress, key reused).
--
-- Parameters, in the order every request-path statement shares: $1 tenant, $2 scope, $3 key,
-- $4 owner token; then $5 operation, $6 fingerprint, $7 lease (ms), $8 TTL (ms).
--
-- Besides the row, it returns how long the holder's lease has left and how long the key has been
-- in flight (since created_at, the first claim of its history), for an honest Retry-After, and
-- how long a completed row stays remembered (for the replay cache).
--
-- The lease-mode variant (Async) also turns synchronous_commit off for its own transaction, so
-- that the claim's commit does not wait for its flush to disk (see Store.claim for why that
-- loses nothing); it is one more column, set_config's result, which the caller ignores.
--
-- A row is "fresh" (behaves as a new key) when its TTL has run out and nobody holds it; it is
-- "takeable" when it is fresh, or its holder's lease ran out on the same request. The
-- fingerprint condition means a different request can never take over a live key's history.
--
-- cur reads the row as this statement's snapshot sees it. When it exists and nobody may take
-- it (the common duplicate: in flight, completed, or a different request), that row is the
-- answer and the statement writes nothing: replays and in-progress answers are plain reads.
--
-- Otherwise (no row yet, or one that looks takeable) the INSERT decides, and it alone may hand
-- out ownership. Its ON CONFLICT DO UPDATE always updates (a takeover writes new values,
-- anything else rewrites the row unchanged), so RETURNING yields the row's latest committed
-- version even when a concurrent request inserted or took it over after the snapshot; a DO
-- NOTHING would return no row at all in that race. The conflict check locks the row and
-- re-evaluates "takeable" on its latest version (the sub-select below reads k and EXCLUDED),
-- so two racing takeovers cannot both win.
--
-- A snapshot answer can be stale by the time it is read (a holder that has just completed or
-- released): the caller then gets in-progress and its retry sees the new state. Ownership is
-- never decided from the snapshot.
{{define "fresh"}}(k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp())){{end -}}
{{define "takeable"}}({{template "fresh"}} OR (k.state = 'in_flight' AND k.lease_expires_at <= statement_timestamp() AND k.fingerprint = {{.}})){{end -}}
{{define "lease_left_ms"}}greatest(0, ceil(extract(epoch FROM lease_expires_at - statement_timestamp()) * 1000))::bigint{{end -}}
{{define "expires_left_ms"}}greatest(0, floor(extract(epoch FROM expires_at - statement_timestamp()) * 1000))::bigint{{end -}}
{{define "async"}}{{if .Async}}, set_config('synchronous_commit', 'off', true) AS async{{end}}{{end -}}
{{define "held_ms"}}greatest(0, floor(extract(epoch FROM statement_timestamp() - created_at) * 1000))::bigint{{end -}}
WITH cur AS (
	SELECT k.attempt, k.fingerprint, k.state, k.status, k.headers, k.body, k.reference, k.lease_expires_at, k.created_at,
		k.expires_at, {{template "takeable" "$6"}} AS takeable
	FROM {{.Table}} AS k WHERE k.tenant = $1 AND k.scope = $2 AND k.key = $3
), ins AS (
	INSERT INTO {{.Table}} AS k
		(tenant, scope, key, operation, fingerprint, state, owner_token, lease_expires_at, attempt, created_at, expires_at)
	SELECT $1, $2, $3, $5, $6, 'in_flight', $4::uuid,
		statement_timestamp() + $7::bigint * interval '1 millisecond', 1, statement_timestamp(),
		statement_timestamp() + $8::bigint * interval '1 millisecond'
	WHERE NOT EXISTS (SELECT FROM cur WHERE NOT cur.takeable)
	ON CONFLICT (tenant, scope, key) DO UPDATE SET
		(operation, fingerprint, state, owner_token, lease_expires_at, expires_at, attempt, created_at,
			status, headers, body, reference, completed_at) =
		(SELECT
			-- a takeover: the new request's row, with a fresh history when the old one expired
			EXCLUDED.operation, EXCLUDED.fingerprint, EXCLUDED.state, EXCLUDED.owner_token,
			EXCLUDED.lease_expires_at, EXCLUDED.expires_at,
			CASE WHEN {{template "fresh"}} THEN 1 ELSE k.attempt + 1 END,
			CASE WHEN {{template "fresh"}} THEN EXCLUDED.created_at ELSE k.created_at END,
			NULL::integer, NULL::jsonb, NULL::bytea, NULL::text, NULL::timestamptz
		WHERE {{template "takeable" "EXCLUDED.fingerprint"}}
		UNION ALL
		SELECT
			-- anything else: the row rewritten unchanged
			k.operation, k.fingerprint, k.state, k.owner_token, k.lease_expires_at, k.expires_at,
			k.attempt, k.created_at, k.status, k.headers, k.body, k.reference, k.completed_at
		WHERE NOT {{template "takeable" "EXCLUDED.fingerprint"}})
	RETURNING owner_token = $4::uuid AS mine, attempt, fingerprint = $6 AS same_fingerprint, state,
		status, headers, body, reference, {{template "lease_left_ms"}} AS lease_left_ms, {{template "held_ms"}} AS held_ms,
		{{template "expires_left_ms"}} AS expires_left_ms
)
SELECT *{{template "async" .}} FROM ins
UNION ALL
SELECT false, attempt, fingerprint = $6, state, status, headers, body, reference, {{template "lease_left_ms"}}, {{template "held_ms"}},
	{{template "expires_left_ms"}}{{template "async" .}}
FROM cur WHERE NOT cur.takeable
