-- What a project may hold on a station (see migrations/sqlite/0027_project_limits.sql).
CREATE TABLE project_limits (
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    station_id TEXT COLLATE "C" NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    limits     TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, station_id)
);
