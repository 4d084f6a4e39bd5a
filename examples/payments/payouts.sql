-- The payouts of the long-operation example (payouts.go). Idempotent (IF NOT EXISTS): applied on
-- every start, after River's own tables (rivermigrate).

CREATE TABLE IF NOT EXISTS payouts (
	tenant_id      text        NOT NULL,
	-- Derived from the tenant and the idempotency key (derivedID), like a payment's id: one key
	-- can never make two payouts.
	payout_id      text        NOT NULL,
	-- pending from the 202 until the worker finished; the worker's UPDATE is fenced on pending,
	-- so a job that runs twice finishes the payout once.
	status         text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
	amount_minor   bigint      NOT NULL CHECK (amount_minor > 0),
	currency       text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
	account        text        NOT NULL,
	bank_charge_id text,
	failure        text,
	created_at     timestamptz NOT NULL DEFAULT now(),
	finished_at    timestamptz,
	PRIMARY KEY (tenant_id, payout_id),
	CHECK ((status = 'succeeded') = (bank_charge_id IS NOT NULL)),
	CHECK ((status = 'failed') = (failure IS NOT NULL))
);
