-- Version 36: jobs are known by number, and batch jobs carry their script. A job's number is
-- its `seq`, which the scheduler gives in submission order and never changes or reuses; an
-- array's number is its first element's, kept on every element (`array_seq`) so an element reads
-- as `N_I` on its own. A batch job's script, directory, output files and environment are one
-- JSON document (`batch`, see mission_api::batch).
ALTER TABLE jobs ADD COLUMN array_seq INTEGER;
ALTER TABLE jobs ADD COLUMN batch TEXT;
-- The jobs a job waits for to end without completing (Slurm's afternotok), a JSON array; NULL
-- for none.
ALTER TABLE jobs ADD COLUMN after_not_ok TEXT;
UPDATE jobs SET array_seq = (SELECT MIN(e.seq) FROM jobs AS e WHERE e.array_id = jobs.array_id)
    WHERE array_id IS NOT NULL;
