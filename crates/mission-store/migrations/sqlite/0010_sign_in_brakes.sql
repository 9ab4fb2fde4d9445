-- Version 10 of the PostgreSQL schema shares the sign-in brakes between replicas. One process
-- keeps them in memory: nothing to add, the version keeps the schemas in step.
SELECT 1;
