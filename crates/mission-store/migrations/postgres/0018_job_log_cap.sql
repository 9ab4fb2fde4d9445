-- Version 18: a job may ask for a smaller log cap than the server's (NULL: the server's), and
-- says when its output passed it.
ALTER TABLE jobs ADD COLUMN log_cap BIGINT;
ALTER TABLE jobs ADD COLUMN log_truncated BOOLEAN NOT NULL DEFAULT FALSE;

-- The tail of a stream past its cap, while the job runs: chunks placed by where they start in
-- all the stream's output (not in the kept log), the oldest dropped as newer ones come. When the
-- job ends, the last quarter-cap bytes move into job_log_chunks after the marker line.
CREATE TABLE job_log_tails (
    job_id     TEXT COLLATE "C" NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE,
    stream     TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
    start      BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    PRIMARY KEY (job_id, stream, start)
);
