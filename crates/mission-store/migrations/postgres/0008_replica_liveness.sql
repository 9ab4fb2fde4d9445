-- Which replicas are alive, and which replica began each unfinished file change: the leader
-- settles the changes of replicas that stopped (a kill -9 mid-upload), never those of a replica
-- still at work.
CREATE TABLE replicas (
    replica_id TEXT COLLATE "C" PRIMARY KEY,
    started_at BIGINT NOT NULL,
    seen_at    BIGINT NOT NULL
);
ALTER TABLE file_intents ADD COLUMN replica_id TEXT COLLATE "C";
