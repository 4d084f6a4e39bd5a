-- One row per idempotency key. The claim inserts it in_flight with a lease; completion, inside
-- the business transaction, turns it complete with the stored outcome. Keys never come from a
-- sequence, so the table can be distributed by scope and partitioned by time.
CREATE TABLE {{.Table}} (
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
    PRIMARY KEY (scope, key)
);

-- Purge walks expired rows oldest first.
CREATE INDEX {{.ExpiresIndex}} ON {{.Table}} (expires_at);
