-- Memberships that follow an external identity provider's group claim (set at sign-in, taken
-- away when the claim no longer names the project), apart from those granted by hand.
ALTER TABLE project_members ADD COLUMN via_claim INTEGER NOT NULL DEFAULT 0;
