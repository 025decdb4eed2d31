-- The change feed: one row per change of a plant, written in the write's
-- transaction. One writer commits in order, so ids increase in commit
-- order; AUTOINCREMENT keeps an id from ever being used again once old
-- events are pruned.
CREATE TABLE events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    type     TEXT    NOT NULL, -- plant.created, plant.updated or plant.deleted
    plant_id INTEGER NOT NULL,
    name     TEXT    NOT NULL, -- the plant as the change left it (for a delete, as it was)
    tag      TEXT,
    at       INTEGER NOT NULL  -- Unix milliseconds
);

-- How far the feed has been pruned: every event up to pruned_through is
-- gone, every later one kept. One row.
CREATE TABLE event_horizon (
    pruned_through INTEGER NOT NULL
);
INSERT INTO event_horizon (pruned_through) VALUES (0);
