-- Idempotency keys of creating requests (the Idempotency-Key header): the first request with a
-- key claims it; its answer is kept, and replayed to a retry with the same key and request,
-- until the key expires.
CREATE TABLE idempotency_keys (
    user_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    status INTEGER,          -- NULL while the first request runs
    content_type TEXT,
    body BLOB,
    PRIMARY KEY (user_id, idempotency_key)
);
CREATE INDEX idempotency_keys_started ON idempotency_keys (started_at);
