-- What a project may spend per period (see migrations/sqlite/0028_project_budgets.sql).
CREATE TABLE project_budgets (
    project_id TEXT COLLATE "C" PRIMARY KEY REFERENCES projects(project_id) ON DELETE CASCADE,
    budget     TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX jobs_project_finished ON jobs (project_id, finished_at);
