-- A release of a claim whose holder asked for a provider key under DoParams.UncertainOnLoss
-- (provider_at is set): the key turns uncertain instead of being deleted, since the provider may
-- have acted on the call; only Store.Resolve settles it. Fenced as release.sql is, by the
-- holder's token and the row still in flight. It returns the attempt it turned uncertain.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
UPDATE {{.Table}} SET state = {{uncertain}}, expires_at = 'infinity'
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}}
	AND provider_at IS NOT NULL
RETURNING attempt
