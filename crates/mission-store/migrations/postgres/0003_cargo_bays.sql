-- Cargo bays: storage locations users' missions keep their files in (see
-- migrations/sqlite/0003_cargo_bays.sql). Credentials are sealed by the server's cargo-bay key.

CREATE TABLE cargo_bays (
    storage_id  TEXT COLLATE "C" PRIMARY KEY,
    user_id     TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('s3', 'local')),
    bucket      TEXT,
    prefix      TEXT,
    endpoint    TEXT,
    region      TEXT,
    path        TEXT,
    credentials BYTEA,                    -- sealed JSON, NULL when the bay has none
    created_at  BIGINT NOT NULL
);
CREATE INDEX cargo_bays_by_user ON cargo_bays (user_id, created_at);

-- Deleting a bay must find the missions that still name it.
CREATE INDEX missions_by_source_storage ON missions (source_storage_id) WHERE source_storage_id IS NOT NULL;
CREATE INDEX missions_by_destination_storage ON missions (destination_storage_id)
    WHERE destination_storage_id IS NOT NULL;
