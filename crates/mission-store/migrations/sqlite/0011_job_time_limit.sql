-- Version 11: a job may have a time limit, in minutes (NULL: none).
ALTER TABLE jobs ADD COLUMN time_limit INTEGER;
