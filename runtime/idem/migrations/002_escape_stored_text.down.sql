-- Back to the encoding of version 1: an escaped tenant, scope or key whose bytes are text goes
-- back to that text, and an escaped tenant whose bytes are not text to "x" and hex. Version 1
-- cannot store a scope or key that is not text: such rows are deleted (their keys execute anew).
-- "text_hex" is the migration up's.
{{define "text_hex"}}'^((0[1-9a-f]|[1-7][0-9a-f]|(c[2-9a-f]|d[0-9a-f])[89ab][0-9a-f]|e0[ab][0-9a-f][89ab][0-9a-f]|(e[1-9a-c]|e[ef])([89ab][0-9a-f]){2}|ed[89][0-9a-f][89ab][0-9a-f]|f0(9[0-9a-f]|[ab][0-9a-f])([89ab][0-9a-f]){2}|f[1-3]([89ab][0-9a-f]){3}|f48[0-9a-f]([89ab][0-9a-f]){2}))*$'{{end -}}
DELETE FROM {{.Table}}
WHERE (starts_with(scope, chr(1)) AND substr(scope, 2) !~ {{template "text_hex"}})
	OR (starts_with(key, chr(1)) AND substr(key, 2) !~ {{template "text_hex"}});

UPDATE {{.Table}} SET
	tenant = CASE
		WHEN NOT starts_with(tenant, chr(1)) THEN tenant
		WHEN substr(tenant, 2) ~ {{template "text_hex"}} THEN convert_from(decode(substr(tenant, 2), 'hex'), 'UTF8')
		ELSE 'x' || substr(tenant, 2) END,
	scope = CASE WHEN starts_with(scope, chr(1)) THEN convert_from(decode(substr(scope, 2), 'hex'), 'UTF8') ELSE scope END,
	key = CASE WHEN starts_with(key, chr(1)) THEN convert_from(decode(substr(key, 2), 'hex'), 'UTF8') ELSE key END
WHERE starts_with(tenant, chr(1)) OR starts_with(scope, chr(1)) OR starts_with(key, chr(1));
