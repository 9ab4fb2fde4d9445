-- What several server replicas on this database share besides the data (see src/cluster.rs).

-- Which replica leads the scheduler. The leader holds an advisory lock on a connection of its
-- own; on taking over it bumps `epoch`, and each of its writes of jobs checks the epoch is still
-- its own (holding the row shared), so a replica that lost the lead can write nothing more.
CREATE TABLE scheduler_leader (
    only_row   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    epoch      BIGINT NOT NULL,
    replica_id TEXT,
    since      BIGINT
);
INSERT INTO scheduler_leader (epoch) VALUES (0);

-- Mail between replicas: scheduler calls to the leader (recipient 'leader'), its answers, and
-- orders for agents connected to another replica. A sender inserts and NOTIFYs the recipient's
-- channel; the recipient takes (deletes) its mail in order.
CREATE TABLE replica_mail (
    seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    recipient TEXT COLLATE "C" NOT NULL,
    body      TEXT NOT NULL,  -- JSON
    sent_at   BIGINT NOT NULL
);
CREATE INDEX replica_mail_by_recipient ON replica_mail (recipient, seq);
