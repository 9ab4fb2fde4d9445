-- Version 9 of the PostgreSQL schema keeps jobs' output in the database, for replicas. One
-- process keeps it as files in its data dir: nothing to add, the version keeps the schemas in
-- step.
SELECT 1;
