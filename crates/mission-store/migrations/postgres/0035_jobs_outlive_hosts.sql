-- Version 35: a job outlives the hosts it ran on and the mission it ran. Deleting a landing zone
-- no longer deletes the jobs that asked for it (their request's landing zone becomes NULL, as
-- their placement's did already); deleting a station or a mission keeps their jobs, which go on
-- naming them: accounting, budgets and the audit trail read them after those are gone (a
-- project's spend is summed from its jobs, so deleting a mission must not give it back).
ALTER TABLE jobs DROP CONSTRAINT jobs_requested_lz_id_fkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_requested_lz_id_fkey
    FOREIGN KEY (requested_lz_id) REFERENCES landing_zones(lz_id) ON DELETE SET NULL;
ALTER TABLE jobs DROP CONSTRAINT jobs_station_id_fkey;
ALTER TABLE jobs DROP CONSTRAINT jobs_mission_id_fkey;
