-- What a project may spend per period (mission_api::ProjectBudget, as JSON); goes with its project.
CREATE TABLE project_budgets (
    project_id TEXT PRIMARY KEY REFERENCES projects(project_id) ON DELETE CASCADE,
    budget     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
-- What a project spent in a period is summed from its jobs that ended in it.
CREATE INDEX jobs_project_finished ON jobs (project_id, finished_at);
