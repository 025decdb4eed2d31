-- The change feed: one row per change of a plant, written by the write's
-- own transaction.
CREATE TABLE events (
    id       bigint      PRIMARY KEY,
    type     text        NOT NULL, -- plant.created, plant.updated or plant.deleted
    plant_id bigint      NOT NULL,
    name     text        NOT NULL, -- the plant as the change left it (for a delete, as it was)
    tag      text,
    at       timestamptz NOT NULL
);

-- Where every write takes its event ids. A write takes them as its last
-- statement and holds the row lock until it commits, so writes that record
-- events commit one after another, in id order: a reader never sees event
-- N+1 before N, though PostgreSQL makes concurrent commits visible in any
-- order. (A sequence would hand out ids in the order writes asked, and
-- they could commit in another.) One row.
CREATE TABLE event_counter (
    last bigint NOT NULL
);
INSERT INTO event_counter (last) VALUES (0);

-- How far the feed has been pruned: every event up to pruned_through is
-- gone, every later one kept. One row.
CREATE TABLE event_horizon (
    pruned_through bigint NOT NULL
);
INSERT INTO event_horizon (pruned_through) VALUES (0);
