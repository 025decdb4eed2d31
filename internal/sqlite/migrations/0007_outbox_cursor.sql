-- Webhook deliveries from the change feed (issue 18). Earlier versions
-- wrote each change's outbox rows (webhook_deliveries) in the change's own
-- transaction. Now the change writes only its event, and the dispatcher
-- copies the events after outbox_cursor into webhook_deliveries before it
-- reads them: a create costs the same with subscribers as without, and the
-- copying waits, with the deliveries, while clients saturate the server.
-- Every event up to now already has its rows: the cursor starts there.
CREATE TABLE outbox_cursor (
    through INTEGER NOT NULL -- the last event copied into webhook_deliveries
);
INSERT INTO outbox_cursor (through)
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0);

-- A subscriber gets the events after the last one recorded when it was
-- added; 0 for those added earlier, whose events the cursor has passed.
ALTER TABLE webhook_subscribers ADD COLUMN since_event INTEGER NOT NULL DEFAULT 0;
