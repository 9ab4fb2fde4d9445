-- Memberships that follow a group claim (see migrations/sqlite/0029_claimed_memberships.sql).
ALTER TABLE project_members ADD COLUMN via_claim BOOLEAN NOT NULL DEFAULT FALSE;
