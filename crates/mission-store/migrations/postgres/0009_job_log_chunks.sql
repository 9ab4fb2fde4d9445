-- Jobs' output on a shared database: each chunk an agent sends, where it starts in its stream.
-- Replicas share no folder for logs (object storage cannot append), so they keep them here.
CREATE TABLE job_log_chunks (
    job_id     TEXT COLLATE "C" NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    stream     TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    start      BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    written_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, stream, start)
);
