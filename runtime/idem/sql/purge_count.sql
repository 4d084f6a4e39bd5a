-- What Purge would delete (a dry run).
SELECT count(*) FROM {{.Table}} AS k
WHERE {{template "expired" "statement_timestamp()"}}
