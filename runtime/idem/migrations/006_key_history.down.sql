DROP TABLE {{.Events}};
ALTER TABLE {{.Table}} DROP COLUMN provider_at;
