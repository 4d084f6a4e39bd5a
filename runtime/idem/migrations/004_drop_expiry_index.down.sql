-- Back to version 3's btree on expires_at, which the Purge of older versions walks oldest first.
-- Building it takes a SHARE lock that blocks writes to the key table (every claim) until the
-- build ends; where that matters, build it first with CREATE INDEX CONCURRENTLY under the same
-- name, and this migration finds it there.
CREATE INDEX IF NOT EXISTS {{.ExpiresIndex}} ON {{.Table}} (expires_at);
