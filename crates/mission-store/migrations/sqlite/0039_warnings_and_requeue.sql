-- Version 39: a job may ask for a signal before it is ended (`signal`, JSON of
-- mission_api::WarningSignal) and to go back in line when its time limit, a reclaim or a node's
-- failure ends it (`requeue`).
ALTER TABLE jobs ADD COLUMN signal TEXT;
ALTER TABLE jobs ADD COLUMN requeue INTEGER NOT NULL DEFAULT 0;
