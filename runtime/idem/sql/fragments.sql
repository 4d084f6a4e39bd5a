-- Fragments the statements share, defined once (sql.go parses this file ahead of each statement).
--
-- "expired" is a key row (alias k) whose history is over as of the time given as the template's
-- argument (statement_timestamp(), or the claim's own time, EXCLUDED.created_at): its TTL has run
-- out and nobody holds it (it completed, or its holder's lease ran out). Such a row behaves as a
-- new key ("fresh" in claim_read.sql), and Purge deletes it.
{{define "expired"}}(k.expires_at <= {{.}} AND (k.state = 'complete' OR k.lease_expires_at <= {{.}})){{end}}
