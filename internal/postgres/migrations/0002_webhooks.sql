-- Webhook subscribers. The secret signs deliveries, so it is kept in clear
-- (a sender needs it; receivers hold the same). A subscriber is leased by
-- one dispatcher, of whichever instance, at a time: lease_owner and
-- lease_until, both NULL when free.
CREATE TABLE webhook_subscribers (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url             text        NOT NULL,
    secret          text        NOT NULL,
    created_at      timestamptz NOT NULL,
    disabled_at     timestamptz,
    disabled_reason text,
    delivered       bigint      NOT NULL DEFAULT 0, -- delivered rows are deleted and counted here
    last_error      text,
    lease_owner     text,
    lease_until     timestamptz
);

-- The outbox: one row per event and subscriber, written by the create's
-- own statement. A row is pending while failed_at is NULL, and deleted once
-- delivered. The plant's fields are the event's body, as committed.
CREATE TABLE webhook_deliveries (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subscriber_id   bigint      NOT NULL REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    event_id        text        NOT NULL,
    plant_id        bigint      NOT NULL,
    name            text        NOT NULL,
    tag             text,
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_status     integer,
    last_error      text,
    failed_at       timestamptz
);

-- A subscriber's pending deliveries in order: its head is the first entry.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscriber_id, id) WHERE failed_at IS NULL;
-- Counting and removing (the cascade) a subscriber's failed deliveries.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (subscriber_id) WHERE failed_at IS NOT NULL;
