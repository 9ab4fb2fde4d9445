-- Version 35: a job outlives the hosts it ran on. Deleting a landing zone no longer deletes the
-- jobs that asked for it (their request's landing zone becomes NULL, as their placement's did
-- already), and deleting a station keeps its jobs, which go on naming it: accounting, budgets
-- and the audit trail read them after the host is gone.
ALTER TABLE jobs DROP CONSTRAINT jobs_requested_lz_id_fkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_requested_lz_id_fkey
    FOREIGN KEY (requested_lz_id) REFERENCES landing_zones(lz_id) ON DELETE SET NULL;
ALTER TABLE jobs DROP CONSTRAINT jobs_station_id_fkey;
