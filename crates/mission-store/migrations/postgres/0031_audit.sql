-- The audit trail (see migrations/sqlite/0031_audit.sql).
CREATE TABLE audit_log (
    seq BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    actor_id TEXT,
    actor_role TEXT NOT NULL,
    request_id TEXT NOT NULL,
    action TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    target_name TEXT,
    project_id TEXT,
    changes TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_project ON audit_log (project_id, seq);
CREATE INDEX audit_log_actor ON audit_log (actor_id, seq);
CREATE INDEX audit_log_target ON audit_log (target_id, seq);
