-- Version 22: job arrays. The array a job is an element of, and its index there.
ALTER TABLE jobs ADD COLUMN array_id TEXT;
ALTER TABLE jobs ADD COLUMN array_index INTEGER;
CREATE INDEX jobs_array ON jobs (array_id, array_index) WHERE array_id IS NOT NULL;
