-- What Purge would delete (a dry run).
SELECT count(*) FROM {{.Table}} AS k
WHERE k.expires_at <= statement_timestamp() AND (k.state = 'complete' OR k.lease_expires_at <= statement_timestamp())
