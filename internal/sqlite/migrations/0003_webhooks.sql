-- Webhook subscribers. The secret signs deliveries, so it is kept in clear
-- (a sender needs it; receivers hold the same). A subscriber is leased by
-- one dispatcher at a time: lease_owner and lease_until (Unix ms), both
-- NULL when free.
CREATE TABLE webhook_subscribers (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    url             TEXT    NOT NULL,
    secret          TEXT    NOT NULL,
    created_at      INTEGER NOT NULL, -- Unix milliseconds
    disabled_at     INTEGER,
    disabled_reason TEXT,
    delivered       INTEGER NOT NULL DEFAULT 0, -- delivered rows are deleted and counted here
    last_error      TEXT,
    lease_owner     TEXT,
    lease_until     INTEGER
);

-- The outbox: one row per event and subscriber, written in the create's
-- transaction. A row is pending while failed_at is NULL, and deleted once
-- delivered. The plant's fields are the event's body, as committed.
CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subscriber_id   INTEGER NOT NULL REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    event_id        TEXT    NOT NULL,
    plant_id        INTEGER NOT NULL,
    name            TEXT    NOT NULL,
    tag             TEXT,
    created_at      INTEGER NOT NULL, -- Unix milliseconds
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_status     INTEGER,
    last_error      TEXT,
    failed_at       INTEGER
);

-- A subscriber's pending deliveries in order: its head is the first entry.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (subscriber_id, id) WHERE failed_at IS NULL;
-- Counting and removing a subscriber's failed deliveries.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (subscriber_id) WHERE failed_at IS NOT NULL;
