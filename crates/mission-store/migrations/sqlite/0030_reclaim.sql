-- Whether a station reclaims room that projects borrowed beyond their nominal limits, for a
-- project below its nominal that needs it (on by default; the station's owner may turn it off).
ALTER TABLE stations ADD COLUMN reclaim INTEGER NOT NULL DEFAULT 1;
-- Whether a job has run (entered `running`) before: a job that goes back in line after running
-- (a reclaimed one) keeps its output, and its next run's output goes on after it.
ALTER TABLE jobs ADD COLUMN ran INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET ran = 1 WHERE started_at IS NOT NULL;
