-- What a project may hold on a station (mission_api::ProjectLimits, as JSON). A row goes with its
-- project or station.
CREATE TABLE project_limits (
    project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    station_id TEXT NOT NULL REFERENCES stations(station_id) ON DELETE CASCADE,
    limits     TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project_id, station_id)
);
