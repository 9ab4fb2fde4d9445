-- Stations and their landing zones (see migrations/sqlite/0004_stations.sql).

CREATE TABLE stations (
    station_id  TEXT COLLATE "C" PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    owner_id    TEXT COLLATE "C" REFERENCES users(user_id) ON DELETE SET NULL,  -- NULL: admins manage it
    open        BOOLEAN NOT NULL DEFAULT FALSE,                                 -- every user may run jobs
    created_at  BIGINT NOT NULL
);

CREATE TABLE station_members (
    station_id TEXT COLLATE "C" NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    user_id    TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    added_at   BIGINT NOT NULL,
    PRIMARY KEY (station_id, user_id)
);
CREATE INDEX station_members_by_user ON station_members (user_id);

CREATE TABLE landing_zones (
    lz_id         TEXT COLLATE "C" PRIMARY KEY,
    station_id    TEXT COLLATE "C" NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    name          TEXT COLLATE "C" NOT NULL,
    token_hash    TEXT COLLATE "C" NOT NULL UNIQUE,
    cpu_count     BIGINT,              -- what the agent last advertised; NULL before it connected
    memory_amount BIGINT,
    gpu_count     BIGINT,
    last_seen_at  BIGINT,
    created_at    BIGINT NOT NULL,
    UNIQUE (station_id, name)
);

-- The station a first start offers: open to all, managed by admins, home of the embedded LZ.
INSERT INTO stations (station_id, name, description, owner_id, open, created_at)
VALUES ('6d697373-696f-4e00-8000-000000000002', 'local', 'The server''s own host', NULL, TRUE,
        CAST(EXTRACT(EPOCH FROM now()) AS BIGINT) * 1000000);
