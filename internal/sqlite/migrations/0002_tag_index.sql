-- Listing by tag walks this index in id order: a filtered page costs the
-- same wherever it starts.
CREATE INDEX plants_by_tag ON plants (tag, id);
