-- Version 12: the cluster account a batch-system gateway (a Slurm landing zone) submits its jobs
-- as, recorded when it is registered (NULL: a landing zone that runs jobs itself); and, for a
-- pilot (an ephemeral landing zone a gateway started inside a batch job), its gateway.
ALTER TABLE landing_zones ADD COLUMN cluster_account TEXT;
ALTER TABLE landing_zones ADD COLUMN pilot_of TEXT;
