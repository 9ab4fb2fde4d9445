-- Version 21: retries. A job's retry policy (JSON; NULL: none), the attempt it is on, the job it
-- was started again from; a mission's default retry policy for its jobs.
ALTER TABLE jobs ADD COLUMN retry TEXT;
ALTER TABLE jobs ADD COLUMN attempt BIGINT NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN rerun_of TEXT;
ALTER TABLE missions ADD COLUMN retry TEXT;
CREATE INDEX jobs_rerun_of ON jobs (rerun_of) WHERE rerun_of IS NOT NULL;
