-- Version 35: a job outlives the hosts it ran on and the mission it ran. Deleting a landing zone
-- no longer deletes the jobs that asked for it (their request's landing zone becomes NULL, as
-- their placement's did already); deleting a station or a mission keeps their jobs, which go on
-- naming them: accounting, budgets and the audit trail read them after those are gone (a
-- project's spend is summed from its jobs, so deleting a mission must not give it back).
--
-- SQLite changes a constraint only by rebuilding the table (https://sqlite.org/lang_altertable.html,
-- "making other kinds of table schema changes"). Migrations run with foreign keys off
-- (`sqlite::migrate`), so dropping the old table deletes nothing that refers to it.
CREATE TABLE jobs_rebuilt (
    job_id          TEXT PRIMARY KEY,
    seq             INTEGER NOT NULL UNIQUE,   -- submission order: FIFO per station
    mission_id      TEXT NOT NULL,             -- kept when its mission is deleted
    user_id         TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    station_id      TEXT NOT NULL,             -- kept when its station is deleted
    requested_lz_id TEXT REFERENCES landing_zones(lz_id) ON DELETE SET NULL,
    lz_id           TEXT REFERENCES landing_zones(lz_id) ON DELETE SET NULL,
    status          TEXT NOT NULL,
    cpu_count       INTEGER NOT NULL,
    memory_amount   INTEGER NOT NULL,
    gpu_count       INTEGER NOT NULL,
    gpu_indices     TEXT NOT NULL DEFAULT '',  -- comma-separated
    command         TEXT NOT NULL,             -- JSON array
    exit_code       INTEGER,
    reason          TEXT,
    limits          TEXT,
    created_at      INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER,
    time_limit      INTEGER,
    labels          TEXT NOT NULL DEFAULT '{}',
    log_cap         INTEGER,
    log_truncated   INTEGER NOT NULL DEFAULT 0,
    wall_time       REAL,
    cpu_time        REAL,
    peak_memory     INTEGER,
    after_ok        TEXT NOT NULL DEFAULT '[]',
    after_any       TEXT NOT NULL DEFAULT '[]',
    pending_kind    TEXT,
    pending_detail  TEXT,
    retry           TEXT,
    attempt         INTEGER NOT NULL DEFAULT 1,
    rerun_of        TEXT,
    array_id        TEXT,
    array_index     INTEGER,
    project_id      TEXT,
    ran             INTEGER NOT NULL DEFAULT 0,
    image_id        TEXT,
    image_digest    TEXT,
    image_reference TEXT,
    session         TEXT,
    session_url     TEXT,
    session_ready_at INTEGER,
    session_warned_at INTEGER
);
INSERT INTO jobs_rebuilt (
    job_id, seq, mission_id, user_id, station_id, requested_lz_id, lz_id, status, cpu_count, memory_amount,
    gpu_count, gpu_indices, command, exit_code, reason, limits, created_at, started_at, finished_at, time_limit,
    labels, log_cap, log_truncated, wall_time, cpu_time, peak_memory, after_ok, after_any, pending_kind,
    pending_detail, retry, attempt, rerun_of, array_id, array_index, project_id, ran, image_id, image_digest,
    image_reference, session, session_url, session_ready_at, session_warned_at
)
SELECT
    job_id, seq, mission_id, user_id, station_id, requested_lz_id, lz_id, status, cpu_count, memory_amount,
    gpu_count, gpu_indices, command, exit_code, reason, limits, created_at, started_at, finished_at, time_limit,
    labels, log_cap, log_truncated, wall_time, cpu_time, peak_memory, after_ok, after_any, pending_kind,
    pending_detail, retry, attempt, rerun_of, array_id, array_index, project_id, ran, image_id, image_digest,
    image_reference, session, session_url, session_ready_at, session_warned_at
FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_rebuilt RENAME TO jobs;

CREATE INDEX jobs_by_mission ON jobs (mission_id);
CREATE INDEX jobs_by_user ON jobs (user_id, seq);
CREATE INDEX jobs_queued ON jobs (station_id, seq) WHERE status = 'queued';
CREATE INDEX jobs_rerun_of ON jobs (rerun_of) WHERE rerun_of IS NOT NULL;
CREATE INDEX jobs_queued_by_user ON jobs (station_id, user_id, seq) WHERE status = 'queued';
CREATE INDEX jobs_by_status ON jobs (status, seq);
CREATE INDEX jobs_array_progress ON jobs (array_id, status, mission_id, user_id) WHERE array_id IS NOT NULL;
CREATE INDEX jobs_project_finished ON jobs (project_id, finished_at);
CREATE INDEX jobs_by_image ON jobs (image_id) WHERE image_id IS NOT NULL;
CREATE TRIGGER job_array_counts_insert AFTER INSERT ON jobs WHEN NEW.array_id IS NOT NULL BEGIN
    INSERT INTO job_array_counts (array_id, status, n) VALUES (NEW.array_id, NEW.status, 1)
        ON CONFLICT (array_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_array_counts_update AFTER UPDATE OF status ON jobs
    WHEN NEW.array_id IS NOT NULL AND NEW.status IS NOT OLD.status BEGIN
    UPDATE job_array_counts SET n = n - 1 WHERE array_id = OLD.array_id AND status = OLD.status;
    INSERT INTO job_array_counts (array_id, status, n) VALUES (NEW.array_id, NEW.status, 1)
        ON CONFLICT (array_id, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER job_array_counts_delete AFTER DELETE ON jobs WHEN OLD.array_id IS NOT NULL BEGIN
    UPDATE job_array_counts SET n = n - 1 WHERE array_id = OLD.array_id AND status = OLD.status;
    DELETE FROM job_array_counts
        WHERE array_id = OLD.array_id AND NOT EXISTS (SELECT 1 FROM job_array_counts WHERE array_id = OLD.array_id AND n > 0);
END;
