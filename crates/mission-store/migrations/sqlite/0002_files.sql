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

-- Running totals for the file limits, kept by triggers in the same transaction as the rows, so
-- checking a limit is one key lookup however many files there are. (No INSERT OR IGNORE in the
-- triggers: the upsert that fires them would impose its own conflict policy on it.)
CREATE TABLE user_file_usage (
    user_id TEXT PRIMARY KEY,
    bytes   INTEGER NOT NULL
);
CREATE TABLE mission_file_usage (
    mission_id TEXT PRIMARY KEY,
    files      INTEGER NOT NULL
);

CREATE TRIGGER mission_files_added AFTER INSERT ON mission_files BEGIN
    INSERT INTO user_file_usage (user_id, bytes)
        SELECT NEW.user_id, 0 WHERE NOT EXISTS (SELECT 1 FROM user_file_usage WHERE user_id = NEW.user_id);
    UPDATE user_file_usage SET bytes = bytes + NEW.size WHERE user_id = NEW.user_id;
    INSERT INTO mission_file_usage (mission_id, files)
        SELECT NEW.mission_id, 0 WHERE NOT EXISTS (SELECT 1 FROM mission_file_usage WHERE mission_id = NEW.mission_id);
    UPDATE mission_file_usage SET files = files + 1 WHERE mission_id = NEW.mission_id;
END;

CREATE TRIGGER mission_files_removed AFTER DELETE ON mission_files BEGIN
    UPDATE user_file_usage SET bytes = bytes - OLD.size WHERE user_id = OLD.user_id;
    UPDATE mission_file_usage SET files = files - 1 WHERE mission_id = OLD.mission_id;
END;

CREATE TRIGGER mission_files_replaced AFTER UPDATE OF size, user_id ON mission_files BEGIN
    UPDATE user_file_usage SET bytes = bytes - OLD.size WHERE user_id = OLD.user_id;
    INSERT INTO user_file_usage (user_id, bytes)
        SELECT NEW.user_id, 0 WHERE NOT EXISTS (SELECT 1 FROM user_file_usage WHERE user_id = NEW.user_id);
    UPDATE user_file_usage SET bytes = bytes + NEW.size WHERE user_id = NEW.user_id;
END;

CREATE TRIGGER missions_removed AFTER DELETE ON missions BEGIN
    DELETE FROM mission_file_usage WHERE mission_id = OLD.mission_id;
END;
