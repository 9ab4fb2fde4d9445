-- Version 7 of the PostgreSQL schema adds what several replicas share (the scheduler's leader
-- and the mail between replicas). A SQLite database serves one process: nothing to add, the
-- version keeps the two schemas' numbers in step.
SELECT 1;
