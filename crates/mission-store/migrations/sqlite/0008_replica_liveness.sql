-- Version 8 of the PostgreSQL schema records which replica began each unfinished file change
-- and which replicas are alive. One process has no replicas; the column keeps the schemas in
-- step and stays NULL here.
ALTER TABLE file_intents ADD COLUMN replica_id TEXT;
