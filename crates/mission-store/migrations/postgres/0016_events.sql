-- Version 16: the event log behind GET /api/v1/events. Every transaction that appends events
-- takes the transaction-scoped advisory lock 7400 first and draws `seq` after it, so events
-- commit in `seq` order across replicas: a reader that has seen event n has seen all before it.
-- Rows are kept for the retention window and outlive the missions and jobs they tell of.
CREATE TABLE events (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    mission_id TEXT,
    job_id     TEXT,
    data       TEXT NOT NULL
);
CREATE INDEX events_by_user ON events (user_id, seq);
CREATE INDEX events_by_time ON events (at);
CREATE INDEX events_by_job ON events (job_id, seq) WHERE job_id IS NOT NULL;
