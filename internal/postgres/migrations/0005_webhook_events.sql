-- Webhooks for every change (issue 18). Which event types each subscriber
-- asked for: a subscriber without a row gets plant.created only, as every
-- subscriber did before, and so does one an earlier binary adds. A table of
-- its own, not columns of webhook_subscribers, which every create reads
-- (see 0004).
CREATE TABLE webhook_subscriber_events (
    subscriber_id bigint  PRIMARY KEY REFERENCES webhook_subscribers (id) ON DELETE CASCADE,
    created       boolean NOT NULL,
    updated       boolean NOT NULL,
    deleted       boolean NOT NULL
);

-- Each delivery's event type (NULL: plant.created, as an earlier binary
-- writes it), the change feed's id of its event (NULL when written by an
-- earlier binary), and when its first attempt failed (NULL until then):
-- a delivery is parked a bounded time after that. Nullable columns without
-- a default change only the catalog: the exclusive lock they take on
-- webhook_deliveries lasts as long as this short migration, not a rewrite.
ALTER TABLE webhook_deliveries
    ADD COLUMN event_type text,
    ADD COLUMN event_seq bigint,
    ADD COLUMN first_failed_at timestamptz;

-- The pending deliveries waiting for a retry, by plant: a plant's later
-- deliveries wait behind them, the other plants' do not. Few rows: it is
-- built at once.
CREATE INDEX webhook_deliveries_waiting ON webhook_deliveries (subscriber_id, plant_id, id) WHERE failed_at IS NULL AND attempts > 0;
