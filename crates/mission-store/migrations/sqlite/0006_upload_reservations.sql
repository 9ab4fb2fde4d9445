-- An upload in flight reserves room under the file limits on its intent, once its size is known
-- and before its object becomes visible, so parallel uploads cannot all pass the same check.
-- The reservation ends with the intent (commit, abort or recovery).
ALTER TABLE file_intents ADD COLUMN user_id TEXT;
ALTER TABLE file_intents ADD COLUMN reserved_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE file_intents ADD COLUMN new_file INTEGER NOT NULL DEFAULT 0;
CREATE INDEX file_intents_user ON file_intents (user_id);
CREATE INDEX file_intents_mission ON file_intents (mission_id);
