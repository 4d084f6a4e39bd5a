-- ProviderKey under DoParams.UncertainOnLoss: the holder marks its row before calling the
-- provider (provider_at), and the key can no longer expire (expires_at 'infinity') until its
-- outcome is known: completed (complete.sql gives it its TTL again), or uncertain until
-- Store.Resolve settles it. Fenced by the holder's token: no row means the claim was taken
-- over, and the provider must not be called.
-- $1 tenant, $2 scope, $3 key, $4 owner token.
UPDATE {{.Table}} SET provider_at = statement_timestamp(), expires_at = 'infinity'
WHERE tenant = $1 AND scope = $2 AND key = $3 AND owner_token = $4::uuid AND state = {{inFlight}}
RETURNING 1
