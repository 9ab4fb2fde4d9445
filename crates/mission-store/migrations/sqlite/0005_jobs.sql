-- Jobs: runs of a mission on a station. The scheduler's whole state lives here, so a restarted
-- server rebuilds its queues and landing-zone occupancy from these rows.

CREATE TABLE jobs (
    job_id          TEXT PRIMARY KEY,
    seq             INTEGER NOT NULL UNIQUE,   -- submission order: FIFO per station
    mission_id      TEXT NOT NULL REFERENCES missions(mission_id) ON DELETE CASCADE,
    user_id         TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    station_id      TEXT NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    requested_lz_id TEXT REFERENCES landing_zones(lz_id) ON DELETE CASCADE,
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
    finished_at     INTEGER
);
CREATE INDEX jobs_by_mission ON jobs (mission_id);
CREATE INDEX jobs_by_user ON jobs (user_id, seq);
CREATE INDEX jobs_active ON jobs (status) WHERE status NOT IN ('completed', 'failed', 'stopped', 'lost');

CREATE TABLE job_history (
    job_id TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    n      INTEGER NOT NULL,
    status TEXT NOT NULL,
    at     INTEGER NOT NULL,
    detail TEXT,
    PRIMARY KEY (job_id, n)
);

-- Files a job returned, beside the logs (which the server keeps as they stream in).
CREATE TABLE job_results (
    job_id      TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    path        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    e_tag       TEXT,
    modified_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, path)
);
