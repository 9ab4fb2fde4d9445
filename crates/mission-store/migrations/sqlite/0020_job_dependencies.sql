-- Version 20: the jobs a job waits for (JSON arrays of job ids: after_ok must complete, after_any
-- must end), and why a job has not started yet (its kind and words; NULL once it runs). The
-- partial index counts the queued jobs ahead of one in its station's line, for `priority`.
ALTER TABLE jobs ADD COLUMN after_ok TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN after_any TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN pending_kind TEXT;
ALTER TABLE jobs ADD COLUMN pending_detail TEXT;
CREATE INDEX jobs_queued ON jobs (station_id, seq) WHERE status = 'queued';
