DROP FUNCTION {{.ClaimLease}}(text, text, text, uuid, text, text, interval, interval);
