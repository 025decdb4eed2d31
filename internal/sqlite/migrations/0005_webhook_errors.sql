-- When each webhook subscriber's last error happened (webhook_subscribers
-- .last_error says what it was). The row is written with the error and
-- deleted when a delivery succeeds; a subscriber whose error was recorded
-- before this migration has none. A table of its own, not a column, so
-- that both engines keep one shape: on PostgreSQL a new column would lock
-- webhook_subscribers, which every create reads, while the migration runs.
CREATE TABLE webhook_subscriber_errors (
    subscriber_id INTEGER PRIMARY KEY REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    last_error_at INTEGER NOT NULL -- Unix milliseconds
);
