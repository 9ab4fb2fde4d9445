-- Stations (pools of compute hosts with an access list) and their landing zones (one agent each).
-- LZ tokens are stored only as SHA-256 hashes, like refresh tokens.

CREATE TABLE stations (
    station_id  TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    owner_id    TEXT REFERENCES users(user_id) ON DELETE SET NULL,  -- NULL: admins manage it
    open        INTEGER NOT NULL DEFAULT 0,                         -- every user may run jobs
    created_at  INTEGER NOT NULL
);

CREATE TABLE station_members (
    station_id TEXT NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (station_id, user_id)
);
CREATE INDEX station_members_by_user ON station_members (user_id);

CREATE TABLE landing_zones (
    lz_id         TEXT PRIMARY KEY,
    station_id    TEXT NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    cpu_count     INTEGER,              -- what the agent last advertised; NULL before it connected
    memory_amount INTEGER,
    gpu_count     INTEGER,
    last_seen_at  INTEGER,
    created_at    INTEGER NOT NULL,
    UNIQUE (station_id, name)
);

-- The station a first start offers: open to all, managed by admins, home of the embedded LZ.
INSERT INTO stations (station_id, name, description, owner_id, open, created_at)
VALUES ('6d697373-696f-4e00-8000-000000000002', 'local', 'The server''s own host', NULL, 1,
        CAST(strftime('%s', 'now') AS INTEGER) * 1000000);
