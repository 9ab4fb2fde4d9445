-- Version 17: webhooks. A webhook gets the events its filter wants from its own `webhook.created`
-- event on (`since_seq`); each such event becomes one delivery, tried until it is delivered or
-- the server's attempts run out. The secret is sealed by the server's key, bound to webhook_id.
CREATE TABLE webhooks (
    webhook_id  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    secret      BLOB NOT NULL,
    mission_ids TEXT NOT NULL,              -- JSON array of ids; empty: all
    kinds       TEXT NOT NULL,              -- JSON array of kind filters; empty: all
    all_users   INTEGER NOT NULL,           -- an admin's: everyone's events
    since_seq   INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX webhooks_by_user ON webhooks (user_id, created_at);

CREATE TABLE webhook_deliveries (
    delivery_id     TEXT PRIMARY KEY,
    webhook_id      TEXT NOT NULL REFERENCES webhooks(webhook_id) ON DELETE CASCADE,
    event_seq       INTEGER NOT NULL,
    event_kind      TEXT NOT NULL,
    body            TEXT NOT NULL,          -- the event as JSON, as it is POSTed
    status          TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL,
    response_status INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    next_attempt_at INTEGER,                -- while pending
    claimed_until   INTEGER,                -- a sender is at it until then
    finished_at     INTEGER,
    -- An event becomes one delivery per webhook, however many replicas route it.
    UNIQUE (webhook_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (created_at);

-- The last event routed into deliveries: routing resumes after it when the server starts.
CREATE TABLE webhook_cursor (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO webhook_cursor (id, seq) SELECT 1, COALESCE(MAX(seq), 0) FROM events;
