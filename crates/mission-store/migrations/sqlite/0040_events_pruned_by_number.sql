-- Version 40: old events are pruned by number, not by time: the events before the first one
-- (in `seq` order) that happened at or after the cutoff go. Finding that one walks the events
-- being removed and stops, so the index on `at`, written with every event (six per job), is
-- no longer needed.
DROP INDEX events_by_time;
