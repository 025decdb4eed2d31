-- Plants: the id is the client's, so it is the primary key, and bigint
-- holds the whole int64 range. tag is NULL when the plant has none; '' is a
-- tag of its own.
--
-- Text that is compared or indexed uses the "C" collation: byte order, as
-- SQLite sorts, the same on every server whatever its locale, and an index
-- that an upgrade of the operating system's locale library cannot corrupt.
CREATE TABLE plants (
    id         bigint      PRIMARY KEY,
    name       text        NOT NULL,
    tag        text        COLLATE "C",
    created_at timestamptz NOT NULL
);

-- Listing by tag walks this index in id order: a filtered page costs the
-- same wherever it starts.
CREATE INDEX plants_by_tag ON plants (tag, id);

-- Tokens are stored only as the SHA-256 of the secret.
CREATE TABLE tokens (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        COLLATE "C" NOT NULL,
    hash         bytea       NOT NULL UNIQUE,
    scopes       text        NOT NULL, -- space-separated, as in OAuth
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- One active token per name; a revoked name can be issued again.
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;
