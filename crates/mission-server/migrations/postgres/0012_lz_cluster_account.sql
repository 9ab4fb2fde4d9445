-- Version 12: the cluster account a batch-system gateway (a Slurm landing zone) submits its jobs
-- as, recorded when it is registered (NULL: a landing zone that runs jobs itself).
ALTER TABLE landing_zones ADD COLUMN cluster_account TEXT;
