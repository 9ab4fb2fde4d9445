-- Users, the built-in identity provider's state, and missions.
-- The same schema as migrations/sqlite, version for version, in PostgreSQL's types: times are
-- microseconds since the Unix epoch (UTC) in BIGINT; ids are hyphenated UUID text. Text that is
-- compared or sorted is COLLATE "C" (bytewise, as SQLite compares), so both backends order
-- listings the same and id lookups skip locale rules.

CREATE TABLE users (
    user_id       TEXT COLLATE "C" PRIMARY KEY,
    username      TEXT COLLATE "C" NOT NULL UNIQUE,
    password_hash TEXT,                 -- NULL for users of an external identity provider
    external_sub  TEXT COLLATE "C" UNIQUE, -- the external provider's `sub`, NULL for built-in users
    admin         BOOLEAN NOT NULL DEFAULT FALSE,
    created_at    BIGINT NOT NULL
);

CREATE TABLE device_codes (
    device_code_hash TEXT COLLATE "C" PRIMARY KEY,  -- sha256 of the device code; never the code
    user_code        TEXT COLLATE "C" NOT NULL UNIQUE,
    client_id        TEXT NOT NULL,
    scope            TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
    user_id          TEXT COLLATE "C" REFERENCES users(user_id) ON DELETE CASCADE,
    interval_secs    BIGINT NOT NULL,
    last_polled_at   BIGINT,
    expires_at       BIGINT NOT NULL,
    created_at       BIGINT NOT NULL
);
CREATE INDEX device_codes_by_expiry ON device_codes (expires_at);

CREATE TABLE refresh_tokens (
    token_hash TEXT COLLATE "C" PRIMARY KEY,  -- sha256 of the token
    user_id    TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    client_id  TEXT NOT NULL,
    scope      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE TABLE missions (
    mission_id             TEXT COLLATE "C" PRIMARY KEY,
    user_id                TEXT COLLATE "C" NOT NULL REFERENCES users(user_id),
    name                   TEXT COLLATE "C" NOT NULL,
    description            TEXT NOT NULL,
    mission_type_id        TEXT COLLATE "C",
    source_storage_id      TEXT COLLATE "C",
    destination_storage_id TEXT COLLATE "C",
    source_path            TEXT,
    destination_path       TEXT,
    settings               TEXT NOT NULL,  -- JSON object of strings
    args                   TEXT NOT NULL,  -- JSON array of strings
    public                 BOOLEAN NOT NULL,
    archived               BOOLEAN NOT NULL,
    created_at             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL
);

CREATE INDEX missions_by_created ON missions (created_at DESC, mission_id DESC);
CREATE INDEX missions_by_user ON missions (user_id, created_at DESC, mission_id DESC);
CREATE INDEX missions_by_name ON missions (name);
CREATE INDEX missions_public ON missions (created_at DESC, mission_id DESC) WHERE public;
