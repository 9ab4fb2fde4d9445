-- Version 32: container images. An image's archive is an object of the service's storage
-- (`images/{image_id}`); its row is written after the object is whole and removed before the
-- object is, so a crash leaves at worst an object without a row, which start-up removes.
CREATE TABLE images (
    image_id   TEXT PRIMARY KEY,
    owner_id   TEXT NOT NULL REFERENCES users(user_id),
    project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
    name       TEXT NOT NULL,
    digest     TEXT NOT NULL,           -- sha256:{hex} of the archive
    size       INTEGER NOT NULL,
    format     TEXT NOT NULL CHECK (format IN ('oci', 'docker', 'registry')),
    visibility TEXT NOT NULL CHECK (visibility IN ('private', 'project', 'public')),
    reference  TEXT,                    -- a registry image's reference; NULL for an archive
    created_at INTEGER NOT NULL,
    UNIQUE (owner_id, name)
);
CREATE INDEX images_by_name ON images (name);
CREATE INDEX images_by_digest ON images (digest);

-- How a mission names the image its jobs run in (a name or a digest); NULL: none.
ALTER TABLE missions ADD COLUMN image TEXT;
-- The image a job runs in, as resolved when it was submitted.
ALTER TABLE jobs ADD COLUMN image_id TEXT;
ALTER TABLE jobs ADD COLUMN image_digest TEXT;
ALTER TABLE jobs ADD COLUMN image_reference TEXT;
CREATE INDEX jobs_by_image ON jobs (image_id) WHERE image_id IS NOT NULL;

-- Whether the landing zone's agent runs jobs in container images, as its last hello said.
ALTER TABLE landing_zones ADD COLUMN images INTEGER NOT NULL DEFAULT 0;

-- The network of the containers a station's jobs run in.
ALTER TABLE stations ADD COLUMN container_network TEXT NOT NULL DEFAULT 'host' CHECK (container_network IN ('host', 'none'));
