-- Plants: the id is the client's, so it is the primary key (an alias of
-- SQLite's rowid: the full int64 range, lookups by id are a B-tree search).
-- tag is NULL when the plant has none; '' is a tag of its own.
CREATE TABLE plants (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    tag        TEXT,
    created_at INTEGER NOT NULL -- Unix milliseconds
);

-- Tokens are stored only as the SHA-256 of the secret.
CREATE TABLE tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    hash         BLOB    NOT NULL UNIQUE,
    scopes       TEXT    NOT NULL, -- space-separated, as in OAuth
    created_at   INTEGER NOT NULL, -- Unix milliseconds
    last_used_at INTEGER,
    revoked_at   INTEGER
);

-- One active token per name; a revoked name can be issued again.
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;
