UPDATE {{.Events}} SET detail = resolution || ': ' || coalesce(detail, '')
WHERE kind = 'resolved' AND resolution IS NOT NULL;
ALTER TABLE {{.Events}} DROP COLUMN resolution;
