-- Webhooks for every change (issue 18). Which event types each subscriber
-- asked for: a subscriber without a row gets plant.created only, as every
-- subscriber did before, and so does one an earlier binary adds.
CREATE TABLE webhook_subscriber_events (
    subscriber_id INTEGER PRIMARY KEY REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    created       INTEGER NOT NULL, -- 1 when it gets plant.created
    updated       INTEGER NOT NULL,
    deleted       INTEGER NOT NULL
);

-- Each delivery's event type (NULL: plant.created, as an earlier binary
-- writes it), the change feed's id of its event (NULL when written by an
-- earlier binary), and when its first attempt failed (NULL until then):
-- a delivery is parked a bounded time after that.
ALTER TABLE webhook_deliveries ADD COLUMN event_type TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN event_seq INTEGER;
ALTER TABLE webhook_deliveries ADD COLUMN first_failed_at INTEGER;

-- The pending deliveries waiting for a retry, by plant: a plant's later
-- deliveries wait behind them, the other plants' do not.
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (subscriber_id, plant_id, id) WHERE failed_at IS NULL AND attempts > 0;
