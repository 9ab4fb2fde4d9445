-- An upload in flight reserves room under the file limits on its intent (see
-- migrations/sqlite/0006_upload_reservations.sql).
ALTER TABLE file_intents ADD COLUMN user_id TEXT COLLATE "C";
ALTER TABLE file_intents ADD COLUMN reserved_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE file_intents ADD COLUMN new_file BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX file_intents_user ON file_intents (user_id);
CREATE INDEX file_intents_mission ON file_intents (mission_id);
