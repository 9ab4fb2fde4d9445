-- Mission files: the index of what each mission holds, and the intents that make uploads
-- crash-safe (see migrations/sqlite/0002_files.sql).

CREATE TABLE mission_files (
    mission_id  TEXT COLLATE "C" NOT NULL REFERENCES missions(mission_id) ON DELETE CASCADE,
    path        TEXT COLLATE "C" NOT NULL,  -- normalised relative path (MissionPath)
    user_id     TEXT COLLATE "C" NOT NULL,  -- the mission's owner, for per-user byte totals
    size        BIGINT NOT NULL,
    sha256      TEXT NOT NULL,              -- hex
    e_tag       TEXT,                       -- the object store's e_tag of the committed object
    modified_at BIGINT NOT NULL,
    PRIMARY KEY (mission_id, path)
);
CREATE INDEX mission_files_by_user ON mission_files (user_id);

CREATE TABLE file_intents (
    intent_id  TEXT COLLATE "C" PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('upload', 'delete')),
    mission_id TEXT COLLATE "C" NOT NULL,
    path       TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL
);

-- Running totals for the file limits, kept by triggers in the same transaction as the rows.
CREATE TABLE user_file_usage (
    user_id TEXT COLLATE "C" PRIMARY KEY,
    bytes   BIGINT NOT NULL
);
CREATE TABLE mission_file_usage (
    mission_id TEXT COLLATE "C" PRIMARY KEY,
    files      BIGINT NOT NULL
);

CREATE FUNCTION mission_files_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE user_file_usage SET bytes = bytes - OLD.size WHERE user_id = OLD.user_id;
    END IF;
    IF TG_OP = 'DELETE' THEN
        UPDATE mission_file_usage SET files = files - 1 WHERE mission_id = OLD.mission_id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO user_file_usage (user_id, bytes) VALUES (NEW.user_id, NEW.size)
            ON CONFLICT (user_id) DO UPDATE SET bytes = user_file_usage.bytes + EXCLUDED.bytes;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO mission_file_usage (mission_id, files) VALUES (NEW.mission_id, 1)
            ON CONFLICT (mission_id) DO UPDATE SET files = mission_file_usage.files + 1;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER mission_files_added AFTER INSERT ON mission_files
    FOR EACH ROW EXECUTE FUNCTION mission_files_count();
CREATE TRIGGER mission_files_removed AFTER DELETE ON mission_files
    FOR EACH ROW EXECUTE FUNCTION mission_files_count();
CREATE TRIGGER mission_files_replaced AFTER UPDATE OF size, user_id ON mission_files
    FOR EACH ROW EXECUTE FUNCTION mission_files_count();

CREATE FUNCTION missions_forget_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM mission_file_usage WHERE mission_id = OLD.mission_id;
    RETURN NULL;
END $$;

CREATE TRIGGER missions_removed AFTER DELETE ON missions
    FOR EACH ROW EXECUTE FUNCTION missions_forget_usage();
