-- The example's business tables. Idempotent (IF NOT EXISTS): the server applies it on every start.
--
-- Every key starts with tenant_id, like idemgen's own key table is scoped by tenant: on Citus both
-- can be distributed by tenant and co-located, so a claim, the business write and the completion
-- stay on one shard.

CREATE TABLE IF NOT EXISTS payments (
	tenant_id             text        NOT NULL,
	-- Derived from the tenant and the idempotency key (see derivedID in payments.go), so one key can
	-- never produce two payments: a second execution for one key fails on this primary key.
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

-- The ledger: one row per money movement, i.e. per execution of a business handler that
-- authorised, captured or refunded. Append-only, and deliberately without a unique key on the
-- payment, the kind or the idempotency key: a handler that ran twice for one key leaves two rows
-- here, whatever the tables above would absorb. That makes exactly-once observable (the tests
-- count these rows per key); a real payments service keeps such a ledger anyway for accounting.
-- event_id is random, not a sequence, so the table can be distributed by tenant like the others.
CREATE TABLE IF NOT EXISTS payment_events (
	tenant_id       text        NOT NULL,
	event_id        uuid        NOT NULL DEFAULT gen_random_uuid(),
	payment_id      text        NOT NULL,
	refund_id       text,
	kind            text        NOT NULL CHECK (kind IN ('authorized', 'captured', 'refunded')),
	amount_minor    bigint      NOT NULL CHECK (amount_minor > 0),
	-- The key the request carried, to find the events of one client request. The key table holds
	-- the raw key in the same database, so this exposes nothing new (logs hash keys instead).
	idempotency_key text        NOT NULL,
	created_at      timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, event_id),
	FOREIGN KEY (tenant_id, payment_id) REFERENCES payments (tenant_id, payment_id),
	CHECK ((kind = 'refunded') = (refund_id IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS payment_events_payment ON payment_events (tenant_id, payment_id, created_at);

-- Transfers made through the bank while the request waited (createTransfer, transfers.go): one
-- row per transfer the bank charged, its id derived from the tenant and the idempotency key. A
-- transfer whose answer from the bank was lost has no row until reconciliation writes it from
-- the bank's report (settled_by = 'reconciliation').
CREATE TABLE IF NOT EXISTS transfers (
	tenant_id      text        NOT NULL,
	transfer_id    text        NOT NULL,
	account        text        NOT NULL,
	amount_minor   bigint      NOT NULL CHECK (amount_minor > 0),
	currency       text        NOT NULL,
	bank_charge_id text        NOT NULL,
	settled_by     text        NOT NULL DEFAULT 'handler',
	created_at     timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant_id, transfer_id)
);

-- The bank's settlement events as received (receiveBankSettlement, settlements.go): one row per
-- execution of the webhook handler. Deliberately without a unique key on event_id: a delivery the
-- handler ran twice would leave two rows, so exactly-once is observable (the tests count rows per
-- event). The receiver's key is the delivery's webhook-id, claimed after its signature was verified.
CREATE TABLE IF NOT EXISTS bank_settlements (
	event_id     text        NOT NULL,
	charge_id    text        NOT NULL,
	amount_minor bigint      NOT NULL,
	currency     text        NOT NULL,
	received_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS bank_settlements_event ON bank_settlements (event_id);

-- When the bank's settlement event for a transfer's charge arrived.
ALTER TABLE transfers ADD COLUMN IF NOT EXISTS settled_at timestamptz;
