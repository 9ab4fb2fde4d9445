-- The web console's sign-in sessions: a browser's session cookie holds a secret whose sha256
-- names one row. Signing out deletes the row, so the cookie is worthless from then on.
CREATE TABLE console_sessions (
    session_hash TEXT COLLATE "C" PRIMARY KEY,
    user_id      TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    csrf_token   TEXT COLLATE "C" NOT NULL,  -- every state-changing request of the session carries it
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
