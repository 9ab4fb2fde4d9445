-- Version 24: reads that stay fast with a million jobs. The job list filtered by status walks
-- jobs_by_status in its order (seq) instead of sorting every match; an array's progress is
-- counted from jobs_array_progress alone, without reading a row per element.
DROP INDEX jobs_active;
CREATE INDEX jobs_by_status ON jobs (status, seq);
DROP INDEX jobs_array;
CREATE INDEX jobs_array_progress ON jobs (array_id, status, mission_id, user_id) WHERE array_id IS NOT NULL;
