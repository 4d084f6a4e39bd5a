-- Tenant, scope and key are stored as themselves when they are text that does not begin with
-- U+0001, and otherwise as U+0001 followed by their bytes in lowercase hex (storedText in
-- scope.go). No text is stored in the escaped form, so two different strings never share a row.
-- Until this version a tenant that was not text was stored as "x" and hex, a form a plain tenant
-- can also take, and scope and key were not escaped at all. This migration rewrites the rows:
--
-- * a tenant, scope or key that is text beginning with U+0001 was stored as itself: it is
--   escaped now, as every such string is from this version on;
-- * a tenant "x" followed by lowercase hex whose bytes are not text (a NUL, or not UTF-8) is the
--   old escape of those bytes: it is rewritten to the new escape of the same bytes. A plain
--   tenant spelled exactly so shared its rows with that tenant until now; they go to the tenant
--   that is not text, which only a direct Do caller can have.
--
-- "text_hex" matches the hex of bytes that are text: UTF-8 (RFC 3629: no overlong forms, no
-- surrogates, nothing past U+10FFFF) without NUL. It is plain SQL, so the migration needs no
-- procedural language.
--
-- On Citus, where the distribution column cannot be updated, run it before distributing the
-- table (on a table with no such rows it changes nothing).
{{define "text_hex"}}'^((0[1-9a-f]|[1-7][0-9a-f]|(c[2-9a-f]|d[0-9a-f])[89ab][0-9a-f]|e0[ab][0-9a-f][89ab][0-9a-f]|(e[1-9a-c]|e[ef])([89ab][0-9a-f]){2}|ed[89][0-9a-f][89ab][0-9a-f]|f0(9[0-9a-f]|[ab][0-9a-f])([89ab][0-9a-f]){2}|f[1-3]([89ab][0-9a-f]){3}|f48[0-9a-f]([89ab][0-9a-f]){2}))*$'{{end -}}
UPDATE {{.Table}} SET
	tenant = CASE WHEN starts_with(tenant, chr(1)) THEN chr(1) || encode(convert_to(tenant, 'UTF8'), 'hex') ELSE tenant END,
	scope = CASE WHEN starts_with(scope, chr(1)) THEN chr(1) || encode(convert_to(scope, 'UTF8'), 'hex') ELSE scope END,
	key = CASE WHEN starts_with(key, chr(1)) THEN chr(1) || encode(convert_to(key, 'UTF8'), 'hex') ELSE key END
WHERE starts_with(tenant, chr(1)) OR starts_with(scope, chr(1)) OR starts_with(key, chr(1));

UPDATE {{.Table}} SET tenant = chr(1) || substr(tenant, 2)
WHERE tenant ~ '^x([0-9a-f]{2})+$' AND substr(tenant, 2) !~ {{template "text_hex"}};
