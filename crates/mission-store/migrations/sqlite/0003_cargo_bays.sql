-- Cargo bays: storage locations (S3 buckets, server directories) that users' missions keep
-- their files in. The server's default storage is not a row; it has a fixed id in the API.
-- Credentials are sealed (AES-256-GCM with a key kept in the data dir, never in the database),
-- bound to their row's storage_id so a sealed blob cannot be moved to another bay.

CREATE TABLE cargo_bays (
    storage_id  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('s3', 'local')),
    bucket      TEXT,
    prefix      TEXT,
    endpoint    TEXT,
    region      TEXT,
    path        TEXT,
    credentials BLOB,                     -- sealed JSON, NULL when the bay has none
    created_at  INTEGER NOT NULL
);
CREATE INDEX cargo_bays_by_user ON cargo_bays (user_id, created_at);

-- Deleting a bay must find the missions that still name it.
CREATE INDEX missions_by_source_storage ON missions (source_storage_id) WHERE source_storage_id IS NOT NULL;
CREATE INDEX missions_by_destination_storage ON missions (destination_storage_id)
    WHERE destination_storage_id IS NOT NULL;
