-- The example's business tables. Idempotent (IF NOT EXISTS): the server applies it on every start.
--
-- Every key starts with tenant_id, like idemgen's own key table is scoped by tenant: on Citus both
-- can be distributed by tenant and co-located, so a claim, the business write and the completion
-- stay on one shard.

CREATE TABLE IF NOT EXISTS payments (
	tenant_id             text        NOT NULL,
	-- Derived from the tenant and the idempotency key (see paymentID in payments.go), so one key can
	-- never produce two payments, even if a request somehow ran twice.
	payment_id            text        NOT NULL,
	status                text        NOT NULL CHECK (status IN ('authorized', 'captured', 'refunded')),
	amount_minor          bigint      NOT NULL CHECK (amount_minor > 0),
	currency              text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
	amount_refunded_minor bigint      NOT NULL DEFAULT 0
		CHECK (amount_refunded_minor >= 0 AND amount_refunded_minor <= amount_minor),
	created_at            timestamptz NOT NULL DEFAULT now(),
	captured_at           timestamptz,
	PRIMARY KEY (tenant_id, payment_id)
);

CREATE TABLE IF NOT EXISTS refunds (
	tenant_id    text        NOT NULL,
	refund_id    text        NOT NULL,
	payment_id   text        NOT NULL,
	amount_minor bigint      NOT NULL CHECK (amount_minor > 0),
	-- pending until the card processor settles the refund; the example has no processor, so tests
	-- and the demo settle it with an UPDATE to show that a marker replay recomputes its answer.
	status       text        NOT NULL CHECK (status IN ('pending', 'succeeded')),
	created_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, refund_id),
	FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, payment_id)
);
