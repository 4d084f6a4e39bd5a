-- Back to version 4's CHECK constraints, under the names version 1 gave them. Adding them reads
-- the whole table to validate its rows while holding an ACCESS EXCLUSIVE lock, which blocks every
-- claim for that scan.
ALTER TABLE {{.Table}}
	ADD CONSTRAINT {{.StateCheck}} CHECK (state IN ('in_flight', 'complete')),
	ADD CONSTRAINT {{.AttemptCheck}} CHECK (attempt >= 1);
