-- Version 41: what a job cost. A station's settings for reckoning its jobs' energy, carbon and
-- money (JSON of mission_api::StationEnergy; NULL: the defaults), and each ended job's figures
-- as they were reckoned when it ended (NULL where it ended before this version).
ALTER TABLE stations ADD COLUMN energy TEXT;
ALTER TABLE jobs ADD COLUMN energy_kwh DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN co2e_g DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN cost DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN currency TEXT;
