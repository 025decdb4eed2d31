-- Noticing a failover that lost commits (docs/postgres.md, "Replicas and
-- failover"). timeline is PostgreSQL's timeline of the last write that
-- took event ids (NULL until the first write after this migration). A
-- write on another timeline (a promoted standby, a point-in-time recovery)
-- first moves the counter a leap past any id the lost commits may have
-- given, and lost_through keeps where the leap ends: the feed reads as
-- pruned up to there, so followers get 410 and resync. Both columns
-- change only the catalog (a constant default rewrites no row).
ALTER TABLE event_counter
    ADD COLUMN timeline text,
    ADD COLUMN lost_through bigint NOT NULL DEFAULT 0;
