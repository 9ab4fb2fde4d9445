-- Version 36: jobs are known by number too. A job's number is its `seq`, which the scheduler
-- gives in submission order and never changes or reuses; an array's number is its first
-- element's, kept on every element (`array_seq`) so an element reads as `N_I` on its own.
ALTER TABLE jobs ADD COLUMN array_seq BIGINT;
UPDATE jobs SET array_seq = (SELECT MIN(e.seq) FROM jobs AS e WHERE e.array_id = jobs.array_id)
    WHERE array_id IS NOT NULL;
