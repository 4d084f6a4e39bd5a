-- Drop the key table's two CHECK constraints (state in ('in_flight', 'complete'), attempt >= 1):
-- PostgreSQL rebuilds a table's check expressions from their stored form for every INSERT and
-- UPDATE statement that writes it, and on the key table that cost more than the check itself:
-- about 16 µs of database time per statement on the request path (a transaction-mode key row's
-- insert went from 43 to 26 µs; lease mode pays it twice, at the claim and at the completion).
-- Only the runtime's own statements write the table, and each writes a literal state and an
-- attempt of 1 or one more than the row's; the NOT NULL constraints and the primary key stay.
--
-- The constraints are dropped by the names PostgreSQL gave them in version 1 (<table>_state_check
-- and <table>_attempt_check, shortened as PostgreSQL shortens names longer than 63 bytes); a
-- constraint renamed since is left alone. Dropping one takes an ACCESS EXCLUSIVE lock on the table
-- for a moment, like migration 4's DROP INDEX. Older instances beside the migrated table never
-- relied on the checks.
ALTER TABLE {{.Table}}
	DROP CONSTRAINT IF EXISTS {{.StateCheck}},
	DROP CONSTRAINT IF EXISTS {{.AttemptCheck}};
