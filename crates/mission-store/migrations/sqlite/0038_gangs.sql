-- Version 38: jobs that run on several landing zones at once (gangs). What the job asked for and
-- the landing zones it was placed on, in rank order, as one JSON document (`gang`, see
-- mission_api::JobGang); NULL for a job of one landing zone.
ALTER TABLE jobs ADD COLUMN gang TEXT;
