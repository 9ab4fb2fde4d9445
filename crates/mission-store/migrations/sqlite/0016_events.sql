-- Version 16: the event log behind GET /api/v1/events. `seq` numbers events in the order they
-- were committed (one writer at a time); rows are kept for the retention window, and outlive
-- the missions and jobs they tell of (no foreign keys).
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,            -- microseconds since the epoch
    kind       TEXT NOT NULL,               -- job.running, mission.created, files.changed, …
    user_id    TEXT NOT NULL,               -- whose mission or job it tells of
    mission_id TEXT,
    job_id     TEXT,
    data       TEXT NOT NULL                -- JSON object
);
CREATE INDEX events_by_user ON events (user_id, seq);
CREATE INDEX events_by_time ON events (at);
CREATE INDEX events_by_job ON events (job_id, seq) WHERE job_id IS NOT NULL;
