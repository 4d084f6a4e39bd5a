-- Store.KeyStats: the keys per operation and state, with the database's clock as $1 (one
-- aggregate over the table, which Citus runs on every shard and merges: it refuses a join of the
-- table with a sub-select of the clock).
SELECT operation,
	count(*) FILTER (WHERE state = {{inFlight}}) AS in_flight,
	count(*) FILTER (WHERE state = {{inFlight}} AND lease_expires_at <= $1::timestamptz) AS stale,
	count(*) FILTER (WHERE state = {{complete}}) AS complete,
	count(*) FILTER (WHERE expires_at <= $1::timestamptz) AS expired,
	min(created_at) FILTER (WHERE state = {{inFlight}}) AS oldest,
	count(*) FILTER (WHERE state = {{uncertain}}) AS uncertain,
	min(provider_at) FILTER (WHERE state = {{uncertain}}) AS oldest_uncertain
FROM {{.Table}} GROUP BY operation
ORDER BY operation
