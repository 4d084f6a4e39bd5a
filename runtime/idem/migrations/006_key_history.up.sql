-- Version 6: the key's history, and the mark of a provider call.
--
-- provider_at is set, durably and before the call, when the holder of a claim asks for a derived
-- provider key under an operation declared uncertain-on-loss (DoParams.UncertainOnLoss). Such a
-- row is never taken over: a claim that finds it abandoned turns it 'uncertain' instead, since
-- the provider may have acted on the lost attempt and cannot be trusted to deduplicate a second
-- one. An uncertain row keeps expires_at 'infinity' until an operator or a reconciliation settles
-- it. Adding a nullable column without a default rewrites nothing: it is instant on a big table.
ALTER TABLE {{.Table}} ADD COLUMN provider_at timestamptz;

-- One row per thing that happened to a key, appended by the runtime in the transactions it
-- already runs (claim, completion, release) and by the operator's tools (resolve, reconcile);
-- never updated. It outlives the key row: it has its own retention (Config.HistoryRetention),
-- and Purge deletes rows older than that. Its rows lead with the key table's tenant, scope and
-- key in the stored form, so on Citus it is distributed by tenant and co-located with the key
-- table. It has no primary key (and no sequence): rows are read by key, in time order.
CREATE TABLE {{.Events}} (
    tenant       text        NOT NULL,
    scope        text        NOT NULL,
    key          text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind         text        NOT NULL,
    operation    text        NOT NULL DEFAULT '',
    attempt      integer,
    status       integer,
    -- why: the reason of a release, the evidence of a resolution, what a mismatch came with
    detail       text,
    -- who: the operator or the tool that resolved the key
    actor        text,
    -- how many replays a 'replayed' row counts
    replays      integer,
    -- a provider call ('provider_call'): the provider, the derived key sent to it, and what it
    -- was asked to move, for reconciliation against the provider's records
    provider     text,
    provider_key text,
    amount       bigint,
    currency     text
);

-- A key's timeline.
CREATE INDEX {{.EventsKeyIndex}} ON {{.Events}} (tenant, scope, key, at);
-- Reconciliation finds a provider's record by the derived key it carries.
CREATE INDEX {{.EventsProviderIndex}} ON {{.Events}} (provider_key) WHERE provider_key IS NOT NULL;
-- Retention deletes the oldest rows: the table is appended in time order, so a BRIN index on the
-- time costs next to nothing per insert.
CREATE INDEX {{.EventsAtIndex}} ON {{.Events}} USING brin (at);
