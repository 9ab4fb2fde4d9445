-- Idempotency keys of creating requests (see migrations/sqlite/0033_idempotency.sql).
CREATE TABLE idempotency_keys (
    user_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    status BIGINT,
    content_type TEXT,
    body BYTEA,
    PRIMARY KEY (user_id, idempotency_key)
);
CREATE INDEX idempotency_keys_started ON idempotency_keys (started_at);
