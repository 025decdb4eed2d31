-- When each webhook subscriber's last error happened (webhook_subscribers
-- .last_error says what it was). The row is written with the error and
-- deleted when a delivery succeeds; a subscriber whose error was recorded
-- before this migration has none. A table of its own, not a column: adding
-- a column would hold an exclusive lock on webhook_subscribers, which every
-- create reads, until the migration commits, and stall the creates of
-- instances of the previous version during a rolling upgrade. The foreign
-- key takes a lighter lock there, which creates and reads do not wait for.
CREATE TABLE webhook_subscriber_errors (
    subscriber_id bigint      PRIMARY KEY REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    last_error_at timestamptz NOT NULL
);
