-- Version 43: why a station's grid intensity file could not be read at its last reading (NULL:
-- it could, or the station has none); the last good value stays in its energy settings.
ALTER TABLE stations ADD COLUMN grid_problem TEXT;
