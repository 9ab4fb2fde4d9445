-- Projects own missions and are charged for jobs. Every user has a personal project whose id is
-- the user's own and whose one member (a manager) is that user, named '~' and the username
-- (shared projects' names may not start with '~'); existing missions and jobs move into their
-- owner's.

CREATE TABLE projects (
    project_id  TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    personal_of TEXT UNIQUE REFERENCES users(user_id) ON DELETE CASCADE,  -- NULL: a shared project
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE project_members (
    project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    role       TEXT NOT NULL CHECK (role IN ('viewer', 'member', 'manager')),
    added_at   INTEGER NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_by_user ON project_members (user_id);

INSERT INTO projects (project_id, name, description, personal_of, created_at, updated_at)
    SELECT user_id, '~' || username, '', user_id, created_at, created_at FROM users;
INSERT INTO project_members (project_id, user_id, role, added_at)
    SELECT user_id, user_id, 'manager', created_at FROM users;

ALTER TABLE missions ADD COLUMN project_id TEXT REFERENCES projects(project_id);
UPDATE missions SET project_id = user_id;
CREATE INDEX missions_by_project ON missions (project_id);

ALTER TABLE jobs ADD COLUMN project_id TEXT;
UPDATE jobs SET project_id = user_id;
