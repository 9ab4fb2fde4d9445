-- Version 38: jobs that run on several landing zones at once (gangs). What the job asked for and
-- the landing zones it was placed on, in rank order, as one JSON document (`gang`, see
-- mission_api::JobGang); NULL for a job of one landing zone.
ALTER TABLE jobs ADD COLUMN gang TEXT;
-- A gang's node n > 0 keeps its output apart, as streams `node-{n}/stdout` and `node-{n}/stderr`.
ALTER TABLE job_log_chunks DROP CONSTRAINT job_log_chunks_stream_check;
ALTER TABLE job_log_chunks ADD CONSTRAINT job_log_chunks_stream_check
    CHECK (stream ~ '^(node-[1-9][0-9]{0,3}/)?std(out|err)$');
ALTER TABLE job_log_tails DROP CONSTRAINT job_log_tails_stream_check;
ALTER TABLE job_log_tails ADD CONSTRAINT job_log_tails_stream_check
    CHECK (stream ~ '^(node-[1-9][0-9]{0,3}/)?std(out|err)$');
