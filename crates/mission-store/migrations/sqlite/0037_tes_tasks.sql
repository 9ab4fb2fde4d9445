-- Version 37: jobs that run GA4GH TES tasks, and jobs being stopped. A task's document as given, with its executors'
-- images as resolved, is one JSON document (`task`, see mission_api::tes::JobTask); what each
-- attempt of it left (its executors' logs, the outputs uploaded, why it failed) is a JSON
-- document per attempt in `task_logs`, written once, as the attempt ends.
ALTER TABLE jobs ADD COLUMN task TEXT;
-- When a stop was ordered for a job that has not ended yet (microseconds): it is stopping (TES
-- says CANCELING) until its landing zone confirms.
ALTER TABLE jobs ADD COLUMN stop_ordered_at INTEGER;
CREATE TABLE task_logs (
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    log TEXT NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
