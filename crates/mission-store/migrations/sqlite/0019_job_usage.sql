-- Version 19: what a job used, as its landing zone measured it (NULL: not measured): seconds of
-- wall and CPU time, and its peak memory in megabytes.
ALTER TABLE jobs ADD COLUMN wall_time REAL;
ALTER TABLE jobs ADD COLUMN cpu_time REAL;
ALTER TABLE jobs ADD COLUMN peak_memory INTEGER;
