-- The change feed, one row per committed batch of changes instead of one
-- per change (issue 13): a batch of 64 creates inserted 64 event rows, a
-- B-tree insert each, and bumped sqlite_sequence; one row costs the write
-- far less. The writer still gives every change its own id, in commit
-- order, the batch's ids following one another: a row holds the events
-- from last - (created + updated + deleted) + 1 to last. Ids are never
-- reused: the next batch starts after the largest last, or after the
-- horizon when every row is pruned.
CREATE TABLE event_batches (
    last    INTEGER PRIMARY KEY, -- the id of the batch's last event
    at      INTEGER NOT NULL,    -- Unix milliseconds, every event of the batch
    created INTEGER NOT NULL,    -- how many events of each type it holds
    updated INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    -- The events in id order, a JSON array of objects:
    -- {"type": "plant.created", "id": 42, "name": "Fern", "tag": "shade"},
    -- "tag" left out for a plant without one.
    changes TEXT NOT NULL
);

-- Each earlier event becomes a batch of its own, so every cursor kept
-- (outbox_cursor, webhook_subscribers.since_event) ends a batch.
INSERT INTO event_batches (last, at, created, updated, deleted, changes)
SELECT id, at, type = 'plant.created', type = 'plant.updated', type = 'plant.deleted',
       json_array(CASE WHEN tag IS NULL
           THEN json_object('type', type, 'id', plant_id, 'name', name)
           ELSE json_object('type', type, 'id', plant_id, 'name', name, 'tag', tag) END)
FROM events ORDER BY id;

-- The largest id given lived in sqlite_sequence; with every event pruned,
-- the horizon now keeps it.
UPDATE event_horizon SET pruned_through = max(pruned_through,
    coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0))
WHERE NOT EXISTS (SELECT 1 FROM events);

DROP TABLE events;
DELETE FROM sqlite_sequence WHERE name = 'events';
