-- Version 18: a job may ask for a smaller log cap than the server's (NULL: the server's), and
-- says when its output passed it.
ALTER TABLE jobs ADD COLUMN log_cap INTEGER;
ALTER TABLE jobs ADD COLUMN log_truncated INTEGER NOT NULL DEFAULT 0;
