-- Version 23: a job's position in its own sub-queue (its user's queued jobs on its station), counted
-- when read by a replica that does not run the scheduler, as jobs_queued counts the station's.
CREATE INDEX jobs_queued_by_user ON jobs (station_id, user_id, seq) WHERE status = 'queued';
