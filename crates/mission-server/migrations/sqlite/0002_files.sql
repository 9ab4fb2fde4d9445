-- Mission files: the index of what each mission holds, and the intents that make uploads
-- crash-safe. The bytes live in object storage at the file's own path; a row here says a
-- complete upload of that path was committed, with its size and sha256.

CREATE TABLE mission_files (
    mission_id  TEXT NOT NULL REFERENCES missions(mission_id) ON DELETE CASCADE,
    path        TEXT NOT NULL,            -- normalised relative path (MissionPath)
    user_id     TEXT NOT NULL,            -- the mission's owner, for per-user byte totals
    size        INTEGER NOT NULL,
    sha256      TEXT NOT NULL,            -- hex
    e_tag       TEXT,                     -- the object store's e_tag of the committed object
    modified_at INTEGER NOT NULL,
    PRIMARY KEY (mission_id, path)
);
CREATE INDEX mission_files_by_user ON mission_files (user_id);

-- Written before a change (upload or delete) touches a file's object and removed once the file
-- row is committed. A row left after a crash names an object that may hold an uncommitted change;
-- start-up recovery reconciles object and row.
CREATE TABLE file_intents (
    intent_id  TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('upload', 'delete')),
    mission_id TEXT NOT NULL,
    path       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
