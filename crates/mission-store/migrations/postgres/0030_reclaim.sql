-- Reclaiming borrowed room (see migrations/sqlite/0030_reclaim.sql).
ALTER TABLE stations ADD COLUMN reclaim BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE jobs ADD COLUMN ran BOOLEAN NOT NULL DEFAULT FALSE;
UPDATE jobs SET ran = TRUE WHERE started_at IS NOT NULL;
