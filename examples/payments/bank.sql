-- The fake bank's own table (bank.go): one row per charge it made. Its primary key is the
-- Idempotency-Key the caller sent, which is how the bank deduplicates: a second call with the
-- same key finds this row and answers with it instead of charging again.
CREATE TABLE IF NOT EXISTS bank_charges (
	idempotency_key text        PRIMARY KEY,
	charge_id       uuid        NOT NULL DEFAULT gen_random_uuid(),
	account         text        NOT NULL,
	amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
	currency        text        NOT NULL,
	-- How many calls carried this key: 1 + the retries the bank absorbed.
	calls           int         NOT NULL DEFAULT 1,
	created_at      timestamptz NOT NULL DEFAULT now()
);
