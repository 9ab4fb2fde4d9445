-- Users, the built-in identity provider's state, and missions.
-- Times are microseconds since the Unix epoch (UTC); ids are hyphenated UUID text.

CREATE TABLE users (
    user_id       TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT,                 -- NULL for users of an external identity provider
    external_sub  TEXT UNIQUE,          -- the external provider's `sub`, NULL for built-in users
    admin         INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL
);

CREATE TABLE device_codes (
    device_code_hash TEXT PRIMARY KEY,  -- sha256 of the device code; the code itself is never stored
    user_code        TEXT NOT NULL UNIQUE,
    client_id        TEXT NOT NULL,
    scope            TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    user_id          TEXT REFERENCES users(user_id) ON DELETE CASCADE,
    interval_secs    INTEGER NOT NULL,
    last_polled_at   INTEGER,
    expires_at       INTEGER NOT NULL,
    created_at       INTEGER NOT NULL
);

CREATE TABLE refresh_tokens (
    token_hash TEXT PRIMARY KEY,        -- sha256 of the token
    user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    client_id  TEXT NOT NULL,
    scope      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE TABLE missions (
    mission_id             TEXT PRIMARY KEY,
    user_id                TEXT NOT NULL REFERENCES users(user_id),
    name                   TEXT NOT NULL,
    description            TEXT NOT NULL,
    mission_type_id        TEXT,
    source_storage_id      TEXT,
    destination_storage_id TEXT,
    source_path            TEXT,
    destination_path       TEXT,
    settings               TEXT NOT NULL,  -- JSON object of strings
    args                   TEXT NOT NULL,  -- JSON array of strings
    public                 INTEGER NOT NULL,
    archived               INTEGER NOT NULL,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL
);

CREATE INDEX missions_by_created ON missions (created_at DESC, mission_id DESC);
CREATE INDEX missions_by_user ON missions (user_id, created_at DESC, mission_id DESC);
CREATE INDEX missions_by_name ON missions (name);
CREATE INDEX missions_public ON missions (created_at DESC, mission_id DESC) WHERE public = 1;
