-- Version 34: a job may be an interactive session (its request as JSON: kind, idle timeout);
-- once its port answers, the URL its owner opens it at, and when.
ALTER TABLE jobs ADD COLUMN session TEXT;
ALTER TABLE jobs ADD COLUMN session_url TEXT;
ALTER TABLE jobs ADD COLUMN session_ready_at BIGINT;
-- When its owner was warned that it nears its time limit (a `session.ending` event).
ALTER TABLE jobs ADD COLUMN session_warned_at BIGINT;
