-- One row per idempotency key. The claim inserts it in_flight with a lease; completion, inside
-- the business transaction, turns it complete with the stored outcome. The primary key leads
-- with tenant (empty when a policy's scope has none) and every statement on the request path
-- names one tenant, so on Citus the table can be distributed by tenant and co-located with the
-- business tables. Keys never come from a sequence.
CREATE TABLE {{.Table}} (
    tenant           text        NOT NULL,
    scope            text        NOT NULL,
    key              text        NOT NULL,
    operation        text        NOT NULL,
    fingerprint      text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('in_flight', 'complete')),
    owner_token      uuid        NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    attempt          integer     NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    status           integer,
    headers          jsonb,
    body             bytea,
    reference        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant, scope, key)
);

-- Purge walks expired rows oldest first.
CREATE INDEX {{.ExpiresIndex}} ON {{.Table}} (expires_at);
