-- Version 42: the parts of each ended job's energy (processors, memory, GPUs), each measured
-- or modelled (JSON of mission_api::EnergyParts; NULL where it ended before this version).
ALTER TABLE jobs ADD COLUMN energy_parts TEXT;
