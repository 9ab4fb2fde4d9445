-- Version 17: webhooks (see migrations/sqlite/0017_webhooks.sql).
CREATE TABLE webhooks (
    webhook_id  TEXT COLLATE "C" PRIMARY KEY,
    user_id     TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    url         TEXT NOT NULL,
    secret      BYTEA NOT NULL,
    mission_ids TEXT NOT NULL,
    kinds       TEXT NOT NULL,
    all_users   BOOLEAN NOT NULL,
    since_seq   BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX webhooks_by_user ON webhooks (user_id, created_at);

CREATE TABLE webhook_deliveries (
    delivery_id     TEXT COLLATE "C" PRIMARY KEY,
    webhook_id      TEXT COLLATE "C" NOT NULL REFERENCES webhooks(webhook_id) ON DELETE CASCADE,
    event_seq       BIGINT NOT NULL,
    event_kind      TEXT NOT NULL,
    body            TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        BIGINT NOT NULL,
    response_status BIGINT,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    next_attempt_at BIGINT,
    claimed_until   BIGINT,
    finished_at     BIGINT,
    UNIQUE (webhook_id, event_seq)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_time ON webhook_deliveries (created_at);

CREATE TABLE webhook_cursor (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO webhook_cursor (id, seq) SELECT 1, COALESCE(MAX(seq), 0) FROM events;
