-- Projects (see migrations/sqlite/0026_projects.sql).

CREATE TABLE projects (
    project_id  TEXT COLLATE "C" PRIMARY KEY,
    name        TEXT COLLATE "C" NOT NULL UNIQUE,
    description TEXT NOT NULL DEFAULT '',
    personal_of TEXT COLLATE "C" UNIQUE REFERENCES users(user_id) ON DELETE CASCADE,  -- NULL: shared
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE TABLE project_members (
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    user_id    TEXT COLLATE "C" NOT NULL REFERENCES users(user_id) ON DELETE CASCADE,
    role       TEXT COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'member', 'manager')),
    added_at   BIGINT NOT NULL,
    PRIMARY KEY (project_id, user_id)
);
CREATE INDEX project_members_by_user ON project_members (user_id);

INSERT INTO projects (project_id, name, description, personal_of, created_at, updated_at)
    SELECT user_id, '~' || username, '', user_id, created_at, created_at FROM users;
INSERT INTO project_members (project_id, user_id, role, added_at)
    SELECT user_id, user_id, 'manager', created_at FROM users;

ALTER TABLE missions ADD COLUMN project_id TEXT COLLATE "C" REFERENCES projects(project_id);
UPDATE missions SET project_id = user_id;
CREATE INDEX missions_by_project ON missions (project_id);

ALTER TABLE jobs ADD COLUMN project_id TEXT COLLATE "C";
UPDATE jobs SET project_id = user_id;
