-- Version 7: how a resolved key was settled, as a column of its own.
--
-- A 'resolved' row of the key's history says whether the uncertain key was settled as completed
-- (the provider acted: retries replay the outcome given) or as failed (it did not: the next retry
-- runs anew). Reconciliation and the operator's tools read it from this column; detail keeps the
-- evidence alone. Rows written before this version carried the resolution as the start of detail
-- ("completed: …", "failed: …"): they are rewritten into the column once, here. Adding a nullable
-- column without a default rewrites nothing; the UPDATE touches only the few resolved rows.
ALTER TABLE {{.Events}} ADD COLUMN resolution text;

UPDATE {{.Events}}
SET resolution = split_part(detail, ':', 1), detail = ltrim(substr(detail, strpos(detail, ':') + 1))
WHERE kind = 'resolved' AND resolution IS NULL AND (detail LIKE 'completed:%' OR detail LIKE 'failed:%');
