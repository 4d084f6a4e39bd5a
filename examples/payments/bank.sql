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
	-- What the charge is for: payout or transfer (chargeRequest.Purpose).
	purpose         text        NOT NULL DEFAULT 'payout',
	created_at      timestamptz NOT NULL DEFAULT now()
);
-- A bank table made before purposes existed gets the column.
ALTER TABLE bank_charges ADD COLUMN IF NOT EXISTS purpose text NOT NULL DEFAULT 'payout';
