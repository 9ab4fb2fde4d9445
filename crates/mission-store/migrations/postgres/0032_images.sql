-- Version 32: container images (see migrations/sqlite/0032_images.sql).
CREATE TABLE images (
    image_id   TEXT COLLATE "C" PRIMARY KEY,
    owner_id   TEXT COLLATE "C" NOT NULL REFERENCES users(user_id),
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    size       BIGINT NOT NULL,
    format     TEXT NOT NULL CHECK (format IN ('oci', 'docker', 'registry')),
    visibility TEXT NOT NULL CHECK (visibility IN ('private', 'project', 'public')),
    reference  TEXT,
    created_at BIGINT NOT NULL,
    UNIQUE (owner_id, name)
);
CREATE INDEX images_by_name ON images (name);
CREATE INDEX images_by_digest ON images (digest);

ALTER TABLE missions ADD COLUMN image TEXT;
ALTER TABLE jobs ADD COLUMN image_id TEXT;
ALTER TABLE jobs ADD COLUMN image_digest TEXT;
ALTER TABLE jobs ADD COLUMN image_reference TEXT;
CREATE INDEX jobs_by_image ON jobs (image_id) WHERE image_id IS NOT NULL;

ALTER TABLE landing_zones ADD COLUMN images BOOLEAN NOT NULL DEFAULT FALSE;

ALTER TABLE stations ADD COLUMN container_network TEXT NOT NULL DEFAULT 'host' CHECK (container_network IN ('host', 'none'));
