//! Jobs, their history and results, and the landing-zone rows the scheduler keeps current.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mission_api::{Job, JobStatus, JobTransition, PendingKind, PendingReason, QueuePosition, Resources, RetryPolicy};
use sqlx::{Connection, QueryBuilder};
use uuid::Uuid;

use super::audit::audited_write;
use super::row::Columns;
use super::sqlite::sqlite_rows;
use super::{
    FileRecord, JobFilter, JobUpdate, LzIdentity, Store, StoreError, from_micros, push_any_of, push_labels, to_micros,
    with_conn,
};

/// How a column's value is taken from the JSON text of a batch on PostgreSQL (SQLite takes
/// JSON values as they are).
#[derive(Clone, Copy)]
pub(super) enum Cast {
    Text,
    Int,
    Real,
    Flag,
}

/// A job row's columns, in one place: what every read selects ([`JOB_COLUMNS`]) and what a new
/// job's insert writes on either backend ([`sqlite_insert_jobs`], [`postgres_insert_jobs`]) from
/// the keys of [`insert_row`] (a test holds those to this list).
pub(super) const JOB_ROW: &[(&str, Cast)] = &[
    ("seq", Cast::Int),
    ("job_id", Cast::Text),
    ("mission_id", Cast::Text),
    ("user_id", Cast::Text),
    ("project_id", Cast::Text),
    ("station_id", Cast::Text),
    ("requested_lz_id", Cast::Text),
    ("lz_id", Cast::Text),
    ("status", Cast::Text),
    ("cpu_count", Cast::Int),
    ("memory_amount", Cast::Int),
    ("gpu_count", Cast::Int),
    ("time_limit", Cast::Int),
    ("gpu_indices", Cast::Text),
    ("command", Cast::Text),
    ("labels", Cast::Text),
    ("log_cap", Cast::Int),
    ("log_truncated", Cast::Flag),
    ("after_ok", Cast::Text),
    ("after_any", Cast::Text),
    ("after_not_ok", Cast::Text),
    ("pending_kind", Cast::Text),
    ("pending_detail", Cast::Text),
    ("retry", Cast::Text),
    ("image_id", Cast::Text),
    ("image_digest", Cast::Text),
    ("image_reference", Cast::Text),
    ("attempt", Cast::Int),
    ("rerun_of", Cast::Text),
    ("array_id", Cast::Text),
    ("array_index", Cast::Int),
    ("array_seq", Cast::Int),
    ("batch", Cast::Text),
    ("task", Cast::Text),
    ("gang", Cast::Text),
    ("signal", Cast::Text),
    ("requeue", Cast::Flag),
    ("stop_ordered_at", Cast::Int),
    ("session", Cast::Text),
    ("session_url", Cast::Text),
    ("session_ready_at", Cast::Int),
    ("exit_code", Cast::Int),
    ("reason", Cast::Text),
    ("limits", Cast::Text),
    ("wall_time", Cast::Real),
    ("cpu_time", Cast::Real),
    ("peak_memory", Cast::Int),
    ("energy_kwh", Cast::Real),
    ("co2e_g", Cast::Real),
    ("cost", Cast::Real),
    ("currency", Cast::Text),
    ("energy_parts", Cast::Text),
    ("created_at", Cast::Int),
    ("started_at", Cast::Int),
    ("finished_at", Cast::Int),
];

/// Microseconds in a day: a job's `finished_at` over it is its day (UTC) since the epoch.
const MICROS_A_DAY: i64 = 86_400_000_000;

/// The columns of [`JOB_ROW`], as a select list.
static JOB_COLUMNS: LazyLock<String> =
    LazyLock::new(|| JOB_ROW.iter().map(|(column, _)| *column).collect::<Vec<_>>().join(", "));

/// The insert of new jobs from a JSON array of [`insert_row`]s on SQLite (`?`).
fn sqlite_insert_jobs() -> String {
    let values: Vec<String> = JOB_ROW.iter().map(|(column, _)| format!("j.value ->> '{column}'")).collect();
    format!("{}INSERT INTO jobs ({}) SELECT {} FROM j", sqlite_rows!("j", "?"), *JOB_COLUMNS, values.join(", "))
}

/// The insert of new jobs from a JSON array of [`insert_row`]s on PostgreSQL (`$1`), in the
/// array's order.
fn postgres_insert_jobs() -> String {
    let values: Vec<String> = JOB_ROW
        .iter()
        .map(|(column, cast)| match cast {
            Cast::Text => format!("j ->> '{column}'"),
            Cast::Int => format!("(j ->> '{column}')::bigint"),
            Cast::Real => format!("(j ->> '{column}')::double precision"),
            Cast::Flag => format!("(j ->> '{column}')::boolean"),
        })
        .collect();
    format!(
        "INSERT INTO jobs ({}) SELECT {} FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS batch (j, k) ORDER BY k",
        *JOB_COLUMNS,
        values.join(", ")
    )
}

/// [`Store::save_jobs`] on PostgreSQL is one statement per JSON parameter of [`JobBatch`] in one
/// transaction: this insert of new job rows ([`postgres_insert_jobs`], made once), changes of job
/// rows, pending reasons, history rows. A history row's `n`, where the batch does not know it,
/// follows the job's rows stored before the statement (which is what a statement's snapshot
/// holds), `k` being its place among the batch's rows of that job.
static POSTGRES_INSERT_JOBS: LazyLock<String> = LazyLock::new(postgres_insert_jobs);

/// The columns of a [`QueuedRow`], in its fields' order.
macro_rules! queued_columns {
    () => {
        "seq, job_id, user_id, project_id, station_id, requested_lz_id, cpu_count, memory_amount, gpu_count, \
        attempt, retry, after_ok, after_any, time_limit, ran, image_id, batch, after_not_ok, pending_kind, task, gang, requeue"
    };
}

/// How many queued jobs one page of [`SQLITE_QUEUED_PAGE`] holds (a few MB of JSON).
const QUEUED_PAGE_ROWS: i64 = 20_000;

/// A page of queued jobs on SQLite, after the sequence number bound first and as many as bound
/// second: one JSON array of [`QueuedRow`]s, each an array of its columns.
const SQLITE_QUEUED_PAGE: &str = concat!(
    "SELECT json_group_array(json_array(seq, job_id, user_id, project_id, station_id, requested_lz_id, cpu_count, \
    memory_amount, gpu_count, attempt, json(retry), json(after_ok), json(after_any), time_limit, \
    json(IIF(ran, 'true', 'false')), image_id, json_extract(batch, '$.workdir'), json(COALESCE(after_not_ok, '[]')), \
    json(IIF(pending_kind IS 'held', 'true', 'false')), COALESCE(json_extract(task, '$.disk_mb'), 0), \
    COALESCE(json_extract(gang, '$.nodes'), 1), json(IIF(json_extract(gang, '$.launch') IS 'first', 'true', 'false')), \
    json(IIF(requeue, 'true', 'false')))) \
    FROM (SELECT ",
    queued_columns!(),
    " FROM jobs WHERE status = 'queued' AND seq > ? ORDER BY seq LIMIT ?)"
);

/// What [`Store::queue_positions`] counts for each job, bound as `$1`: how many queued jobs of its
/// station, and of its user there, come before it (through the `jobs_queued` indexes).
const QUEUE_POSITIONS: &str = "SELECT j.job_id, \
    (SELECT COUNT(*) FROM jobs AS e WHERE e.station_id = j.station_id AND e.status = 'queued' AND e.seq < j.seq) \
        AS station, \
    (SELECT COUNT(*) FROM jobs AS e WHERE e.station_id = j.station_id AND e.user_id = j.user_id \
        AND e.status = 'queued' AND e.seq < j.seq) AS own \
    FROM jobs AS j WHERE j.status = 'queued'";

/// [`Store::usage_summary`]'s sums, the user id bound next, other conditions pushed after.
const USAGE_SUMMARY: &str = "SELECT COUNT(*) AS jobs, SUM(wall_time) AS wall, SUM(cpu_time) AS cpu, \
    SUM(cpu_count * wall_time) AS held, \
    AVG(CASE WHEN cpu_time IS NOT NULL AND wall_time > 0 THEN cpu_time / (cpu_count * wall_time) END) AS efficiency, \
    COALESCE(SUM(CASE WHEN peak_memory * 2 < memory_amount THEN 1 ELSE 0 END), 0) AS over_requested, \
    SUM(energy_kwh) AS energy, SUM(co2e_g) AS co2e \
    FROM jobs WHERE wall_time IS NOT NULL AND user_id = ";

/// The statuses a job ends in, as an SQL list.
macro_rules! final_statuses {
    () => {
        "('completed', 'failed', 'stopped', 'lost')"
    };
}
pub(super) const FINAL_STATUSES: &str = final_statuses!();

impl Store {
    /// Writes new jobs (each with its sequence number, which the scheduler gives, and its history
    /// so far), then job moves, in order, then the
    /// pending reasons of queued jobs (`None` clears one), in one transaction: a move updates the row and appends
    /// its history entry. Entering `running` sets `started_at`; a final status sets
    /// `finished_at`; leaving the queue clears the pending reason unless the move gives one. A
    /// pending reason for a job no longer queued is dropped.
    pub async fn save_jobs(
        &self,
        inserts: &[(u64, Job)],
        updates: &[JobUpdate],
        pending: &[(Uuid, Option<PendingReason>)],
    ) -> Result<(), StoreError> {
        self.save_jobs_with_events(inserts, updates, pending, &[]).await
    }

    /// [`Store::save_jobs`], with `events` of the scheduler's own (a project's budget warning)
    /// appended in the same transaction, after the jobs' events.
    pub async fn save_jobs_with_events(
        &self,
        inserts: &[(u64, Job)],
        updates: &[JobUpdate],
        pending: &[(Uuid, Option<PendingReason>)],
        events: &[super::NewEvent],
    ) -> Result<(), StoreError> {
        // The audit entries of the changes the batch makes (jobs submitted or stopped).
        let audit = super::audit::notes_json(&super::audit::take());
        if inserts.is_empty() && updates.is_empty() && pending.is_empty() && events.is_empty() && audit == "[]" {
            return Ok(());
        }
        // The batch goes as four JSON parameters to statements that are the same whatever its
        // size and shape, so they are prepared once (parsing SQL built per batch was an eighth
        // of the server's CPU under load).
        let batch = JobBatch::new(inserts, updates, pending);
        let events = super::events::events_json(events);
        // The events the commit read back, where it does (SQLite), for the event hub.
        let handed = match &self.backend {
            super::Backend::Sqlite(db) => {
                // One script: one trip to SQLite's worker thread (those thread hand-offs were most
                // of what the scheduler waited for).
                let script = sqlx::query(SQLITE_SAVE_JOBS.as_str())
                    .bind(batch.jobs.as_str())
                    .bind(batch.changes.as_str())
                    .bind(batch.pending.as_str())
                    .bind(batch.history.as_str())
                    .bind(batch.history.as_str())
                    .bind(events.as_str())
                    .bind(audit.as_str());
                let appended = super::sqlite::run_script(&mut *db.writer().await, script).await?;
                Some(appended.iter().map(super::events::event_from_row).collect::<Result<_, _>>()?)
            }
            super::Backend::Postgres(db) => {
                let mut conn = db.connection().await?;
                let mut tx = conn.begin().await?;
                if let Some(epoch) = self.fence {
                    // Held shared until the commit: a replica taking over bumps the epoch only
                    // after this write is in, and rebuilds from the store after that.
                    let still = sqlx::query("SELECT epoch FROM scheduler_leader WHERE epoch = $1 FOR SHARE")
                        .bind(epoch)
                        .fetch_optional(&mut *tx)
                        .await?;
                    if still.is_none() {
                        return Err(StoreError::NotLeader);
                    }
                }
                for (statement, parameter) in [
                    (POSTGRES_INSERT_JOBS.as_str(), &batch.jobs),
                    (POSTGRES_CHANGE_JOBS, &batch.changes),
                    (POSTGRES_PENDING, &batch.pending),
                    (POSTGRES_APPEND_HISTORY, &batch.history),
                ] {
                    if parameter != "[]" {
                        sqlx::query(statement).bind(parameter.as_str()).execute(&mut *tx).await?;
                    }
                }
                if batch.history != "[]" || events != "[]" {
                    sqlx::query(super::events::POSTGRES_EVENTS_LOCK).execute(&mut *tx).await?;
                    sqlx::query(super::events::POSTGRES_EVENTS_NOTIFY).execute(&mut *tx).await?;
                    sqlx::query(POSTGRES_JOB_EVENTS).bind(batch.history.as_str()).execute(&mut *tx).await?;
                    sqlx::query(super::events::POSTGRES_APPEND_EVENTS).bind(events.as_str()).execute(&mut *tx).await?;
                }
                if audit != "[]" {
                    sqlx::query(super::audit::POSTGRES_APPEND_AUDIT).bind(audit.as_str()).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                None
            }
        };
        match handed {
            Some(appended) => self.events_handed(appended),
            None if batch.history != "[]" || events != "[]" => self.events_appended(),
            None => {}
        }
        Ok(())
    }

    /// One job with its history.
    pub async fn job(&self, job_id: Uuid) -> Result<Option<Job>, StoreError> {
        let Some(mut job) = self.job_row(job_id).await? else { return Ok(None) };
        job.history = self.job_history(job_id).await?;
        Ok(Some(job))
    }

    /// One job without its history (`history` left empty): one query.
    pub async fn job_row(&self, job_id: Uuid) -> Result<Option<Job>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!("SELECT {} FROM jobs WHERE job_id = $1", *JOB_COLUMNS))
                    .bind(job_id.to_string())
                    .fetch_optional(conn)
                    .await?
            };
            row.as_ref().map(job_from_row).transpose()
        })
    }

    /// A job's transitions, oldest first.
    pub async fn job_history(&self, job_id: Uuid) -> Result<Vec<JobTransition>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query("SELECT status, at, detail FROM job_history WHERE job_id = $1 ORDER BY n")
                    .bind(job_id.to_string())
                    .fetch_all(conn)
                    .await?
            };
            rows.iter()
                .map(|r| {
                    Ok(JobTransition {
                        status: parse_status(&r.text("status")?)?,
                        at: r.time("at")?,
                        detail: r.opt_text("detail")?,
                    })
                })
                .collect()
        })
    }

    /// A page of jobs matching `filter`, newest first, with the total count; listings leave
    /// `history` empty (one job's `GET` has it).
    pub async fn jobs(&self, filter: &JobFilter) -> Result<(Vec<Job>, u64), StoreError> {
        Ok((self.job_page(filter).await?, self.count_jobs(filter).await?))
    }

    /// The page of [`Store::jobs`] alone, newest first, for a reader that knows the total.
    pub async fn job_page(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("SELECT {} FROM jobs", *JOB_COLUMNS));
                job_conditions(&mut q, filter);
                q.push(" ORDER BY seq DESC LIMIT ")
                    .push_bind(i64::from(filter.items))
                    .push(" OFFSET ")
                    .push_bind(i64::from(filter.page.saturating_sub(1)) * i64::from(filter.items));
                q.build().fetch_all(conn).await?
            };
            rows.iter().map(job_from_row).collect()
        })
    }

    /// How many jobs match `filter` (its page aside).
    pub async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let mut count: QueryBuilder<Db> = QueryBuilder::new("SELECT COUNT(*) FROM jobs");
            job_conditions(&mut count, filter);
            let total: i64 = count.build_query_scalar().fetch_one(conn).await?;
            Ok(total as u64)
        })
    }

    /// How far the elements of a job array (of one user's, or anyone's) got; `None` when there
    /// is no such array. Read from the counts per status that the store's triggers keep (one row
    /// per status, however large the array) and one element for its mission and owner.
    pub async fn job_array(
        &self,
        array_id: Uuid,
        user: Option<Uuid>,
    ) -> Result<Option<mission_api::JobArray>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let rows = {
                let mut q: QueryBuilder<Db> = QueryBuilder::new(
                    "SELECT element.mission_id, element.array_seq, c.status, c.n FROM job_array_counts c, \
                     (SELECT mission_id, user_id, array_seq FROM jobs WHERE array_id = ",
                );
                q.push_bind(array_id.to_string());
                q.push(" LIMIT 1) element WHERE c.array_id = ").push_bind(array_id.to_string());
                if let Some(user) = user {
                    q.push(" AND element.user_id = ").push_bind(user.to_string());
                }
                q.build().fetch_all(conn).await?
            };
            let Some(first) = rows.first() else { return Ok(None) };
            let mut array = mission_api::JobArray {
                array_id,
                number: first.opt_int("array_seq")?.map_or(0, |n| n as u64),
                mission_id: first.uuid("mission_id")?,
                ..Default::default()
            };
            for row in &rows {
                let n = row.count("n")?;
                array.size += n;
                match parse_status(&row.text("status")?)? {
                    JobStatus::Queued => array.queued += n,
                    JobStatus::Completed => array.completed += n,
                    JobStatus::Failed | JobStatus::Lost => array.failed += n,
                    JobStatus::Stopped => array.stopped += n,
                    _ => array.running += n,
                }
            }
            Ok(Some(array))
        })
    }

    /// The elements of a job array that have not ended.
    pub async fn unfinished_array_jobs(&self, array_id: Uuid) -> Result<Vec<Uuid>, StoreError> {
        with_conn!(self, reader, |conn| {
            let ids: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT job_id FROM jobs WHERE array_id = $1 AND status NOT IN {FINAL_STATUSES} ORDER BY seq"
            ))
            .bind(array_id.to_string())
            .fetch_all(conn)
            .await?;
            ids.iter().map(|id| super::row::parse_uuid(id)).collect()
        })
    }

    /// Replaces a job's labels (checked by the caller); false when there is no such job.
    pub async fn set_job_labels(&self, job_id: Uuid, labels: &mission_api::Labels) -> Result<bool, StoreError> {
        audited_write!(self, |conn| {
            let updated = sqlx::query("UPDATE jobs SET labels = $1 WHERE job_id = $2")
                .bind(super::to_json(labels))
                .bind(job_id.to_string())
                .execute(conn)
                .await?;
            Ok(updated.rows_affected() == 1)
        })
    }

    /// Records that a job's output passed its log cap ([`Job::log_truncated`]).
    pub async fn mark_log_truncated(&self, job_id: Uuid) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("UPDATE jobs SET log_truncated = TRUE WHERE job_id = $1")
                .bind(job_id.to_string())
                .execute(conn)
                .await?;
            Ok(())
        })
    }

    /// Records that a running session's port answered: where its owner opens it, from `at`.
    /// False when the job is no running session of `lz_id`, or was ready already.
    pub async fn mark_session_ready(
        &self,
        job_id: Uuid,
        lz_id: Uuid,
        url: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        with_conn!(self, writer, |conn| {
            let updated = sqlx::query(
                "UPDATE jobs SET session_url = $1, session_ready_at = $2 WHERE job_id = $3 AND lz_id = $4 \
                 AND status = 'running' AND session IS NOT NULL AND session_ready_at IS NULL",
            )
            .bind(url)
            .bind(to_micros(at))
            .bind(job_id.to_string())
            .bind(lz_id.to_string())
            .execute(conn)
            .await?;
            Ok(updated.rows_affected() == 1)
        })
    }

    /// Notes that a stop was ordered at `at` for `job_id`, unless it has ended (or a stop was
    /// ordered before).
    pub async fn note_stop_ordered(&self, job_id: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE jobs SET stop_ordered_at = $1 WHERE job_id = $2 AND stop_ordered_at IS NULL \
                 AND status IN ('assigned', 'staging', 'running', 'uploading')",
            )
            .bind(to_micros(at))
            .bind(job_id.to_string())
            .execute(conn)
            .await?;
            Ok(())
        })
    }

    /// Warns the owner of a running session of `lz_id` that it nears its time limit: a
    /// `session.ending` event carrying `data`, once. False when the job is no such session, or
    /// its owner was warned already.
    pub async fn warn_session_ending(
        &self,
        job_id: Uuid,
        lz_id: Uuid,
        data: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        use crate::events::{NewEvent, commit_with_events, events_json};
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let warned = sqlx::query(
                "UPDATE jobs SET session_warned_at = $1 WHERE job_id = $2 AND lz_id = $3 AND status = 'running' \
                 AND session IS NOT NULL AND session_warned_at IS NULL RETURNING user_id, mission_id",
            )
            .bind(to_micros(at))
            .bind(job_id.to_string())
            .bind(lz_id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = warned else { return Ok(false) };
            let (user_id, mission_id) = (row.uuid("user_id")?, row.uuid("mission_id")?);
            let event = NewEvent::job("session.ending", user_id, mission_id, job_id, data, at);
            commit_with_events!(self, tx, events_json(&[event]));
            Ok(true)
        })
    }

    /// Records that `user_id` opens a shell in `job_id`, which must be theirs and running: a
    /// `shell.opened` event with `data`, and the audit entry noted for it, in one transaction.
    /// Answers the landing zone its node `node` runs on (a gang's by rank; 0 for any other job);
    /// `None` when it is not such a job, or has no such node.
    pub async fn open_shell(
        &self,
        job_id: Uuid,
        user_id: Uuid,
        node: u32,
        data: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Result<Option<Uuid>, StoreError> {
        use crate::events::{NewEvent, commit_with_events, events_json};
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let running = sqlx::query(
                "SELECT lz_id, mission_id, gang FROM jobs WHERE job_id = $1 AND user_id = $2 AND status = 'running' \
                 AND lz_id IS NOT NULL",
            )
            .bind(job_id.to_string())
            .bind(user_id.to_string())
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = running else { return Ok(None) };
            let gang = row.opt_json::<mission_api::JobGang>("gang")?;
            let lz_id = match gang {
                Some(gang) => gang.lz_ids.get(node as usize).copied(),
                None => (node == 0).then_some(row.uuid("lz_id")?),
            };
            let (Some(lz_id), mission_id) = (lz_id, row.uuid("mission_id")?) else { return Ok(None) };
            let event = NewEvent::job("shell.opened", user_id, mission_id, job_id, data, at);
            commit_with_events!(self, tx, events_json(&[event]));
            Ok(Some(lz_id))
        })
    }

    /// Of `job_ids`, the jobs placed on `lz_id` (in submission order), with what their end needs:
    /// their mission, whether their output passed its log cap, and the mission's destination
    /// cargo bay. One read for a batch of an agent's reports.
    pub async fn ending_jobs(&self, job_ids: &[Uuid], lz_id: Uuid) -> Result<Vec<EndingJob>, StoreError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        with_conn!(self, reader, |conn| {
            let mut q = QueryBuilder::new(
                "SELECT j.job_id, j.mission_id, j.log_truncated, j.gang, m.destination_storage_id \
                 FROM jobs j JOIN missions m USING (mission_id) WHERE j.lz_id = ",
            );
            q.push_bind(lz_id.to_string());
            push_any_of(&mut q, "j.job_id", job_ids.iter().map(Uuid::to_string));
            q.push(" ORDER BY j.seq");
            let rows = { q.build().fetch_all(conn).await? };
            rows.iter()
                .map(|r| {
                    Ok(EndingJob {
                        job_id: r.uuid("job_id")?,
                        mission_id: r.uuid("mission_id")?,
                        log_truncated: r.flag("log_truncated")?,
                        nodes: r.opt_json::<mission_api::JobGang>("gang")?.map_or(1, |gang| gang.nodes),
                        destination_storage_id: r.opt_uuid("destination_storage_id")?,
                    })
                })
                .collect()
        })
    }

    /// What `user_id`'s jobs that ended (at or after `since`, of `mission_ids` when any are given)
    /// used, summed over those that reported it.
    pub async fn usage_summary(
        &self,
        user_id: Uuid,
        mission_ids: &[Uuid],
        since: Option<DateTime<Utc>>,
    ) -> Result<mission_api::UsageSummary, StoreError> {
        fn build<'q, DB>(user_id: Uuid, mission_ids: &[Uuid], since: Option<DateTime<Utc>>) -> QueryBuilder<'q, DB>
        where
            DB: sqlx::Database,
            String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
            i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        {
            let mut q = QueryBuilder::new(USAGE_SUMMARY);
            q.push_bind(user_id.to_string());
            if let Some(since) = since {
                q.push(" AND finished_at >= ").push_bind(to_micros(since));
            }
            push_any_of(&mut q, "mission_id", mission_ids.iter().map(Uuid::to_string));
            q
        }
        with_conn!(self, reader, |conn| {
            let row = { build(user_id, mission_ids, since).build().fetch_one(conn).await? };
            Ok(mission_api::UsageSummary {
                jobs: row.count("jobs")?,
                wall_hours: row.opt_real("wall")?.unwrap_or(0.0) / 3600.0,
                cpu_hours: row.opt_real("cpu")?.unwrap_or(0.0) / 3600.0,
                cpu_hours_held: row.opt_real("held")?.unwrap_or(0.0) / 3600.0,
                mean_cpu_efficiency: row.opt_real("efficiency")?,
                over_requested_memory: row.count("over_requested")?,
                energy_kwh: row.opt_real("energy")?.unwrap_or(0.0),
                co2e_g: row.opt_real("co2e")?.unwrap_or(0.0),
            })
        })
    }

    /// What the ended jobs in `scope` used, per `group`, by group (the jobs without one last);
    /// `since` and `until` bound when they ended (`until` excluded). Each group has its cost per
    /// currency, and with `since` its use per day (UTC) that some job of it ended.
    pub async fn usage_by(
        &self,
        group: &UsageGrouping,
        scope: &UsageScope,
        since: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Vec<mission_api::UsageGroup>, StoreError> {
        /// What a row is split by, beside its group.
        #[derive(Clone, Copy, PartialEq)]
        enum Split {
            Nothing,
            Currency,
            Day,
        }
        fn build<'q, DB>(
            group: &UsageGrouping,
            scope: &UsageScope,
            since: Option<DateTime<Utc>>,
            until: Option<DateTime<Utc>>,
            split: Split,
        ) -> QueryBuilder<'q, DB>
        where
            DB: sqlx::Database,
            String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
            i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        {
            let postgres = DB::NAME == <sqlx::Postgres as sqlx::Database>::NAME;
            let mut q = QueryBuilder::new("SELECT ");
            match group {
                UsageGrouping::Project => q.push("j.project_id AS grp, p.name AS name, "),
                UsageGrouping::User => q.push("j.user_id AS grp, u.username AS name, "),
                UsageGrouping::Label(key) if postgres => {
                    q.push("j.labels::jsonb ->> ").push_bind(key.clone()).push(" AS grp, ")
                }
                UsageGrouping::Label(key) => {
                    q.push("j.labels ->> ").push_bind(format!("$.\"{key}\"")).push(" AS grp, ")
                }
            };
            match split {
                Split::Nothing => q.push(""),
                Split::Currency => q.push("j.currency AS split, SUM(j.cost) AS cost, "),
                Split::Day => q.push(format!("j.finished_at / {MICROS_A_DAY} AS split, ")),
            };
            q.push(
                "COUNT(*) AS jobs, SUM(j.w) AS wall, SUM(j.cpu_time) AS cpu, SUM(j.cpu_count * j.w) AS held, \
                 SUM(j.gpu_count * j.w) AS gpu, SUM(j.memory_amount * j.w) AS memory, \
                 SUM(j.energy_kwh) AS energy, SUM(j.co2e_g) AS co2e, \
                 AVG(CASE WHEN j.cpu_time IS NOT NULL AND j.w > 0 THEN j.cpu_time / (j.cpu_count * j.w) END) AS efficiency \
                 FROM (SELECT project_id, user_id, labels, cpu_count, gpu_count, memory_amount, cpu_time, \
                 energy_kwh, co2e_g, cost, currency, finished_at, \
                 COALESCE(wall_time, (finished_at - started_at) / 1000000.0, 0.0) AS w FROM jobs \
                 WHERE finished_at IS NOT NULL",
            );
            if split == Split::Currency {
                q.push(" AND cost IS NOT NULL");
            }
            if let Some(since) = since {
                q.push(" AND finished_at >= ").push_bind(to_micros(since));
            }
            if let Some(until) = until {
                q.push(" AND finished_at < ").push_bind(to_micros(until));
            }
            if let UsageScope::Project(project_id) = scope {
                q.push(" AND project_id = ").push_bind(project_id.to_string());
            }
            if let UsageScope::Own { user_id, managed } = scope {
                q.push(" AND (user_id = ").push_bind(user_id.to_string());
                if !managed.is_empty() {
                    q.push(" OR project_id IN (");
                    let mut list = q.separated(", ");
                    for project in managed {
                        list.push_bind(project.to_string());
                    }
                    list.push_unseparated(")");
                }
                q.push(")");
            }
            q.push(") AS j");
            match group {
                UsageGrouping::Project => {
                    q.push(" LEFT JOIN projects p ON p.project_id = j.project_id GROUP BY j.project_id, p.name")
                }
                UsageGrouping::User => {
                    q.push(" LEFT JOIN users u ON u.user_id = j.user_id GROUP BY j.user_id, u.username")
                }
                UsageGrouping::Label(_) => q.push(" GROUP BY 1"),
            };
            if split != Split::Nothing {
                q.push(", split ORDER BY split");
            }
            q
        }
        let named = !matches!(group, UsageGrouping::Label(_));
        let splits = [Some(Split::Nothing), Some(Split::Currency), since.map(|_| Split::Day)];
        let mut groups: Vec<mission_api::UsageGroup> = Vec::new();
        let mut index: HashMap<Option<String>, usize> = HashMap::new();
        with_conn!(self, reader, |conn| {
            for split in splits.into_iter().flatten() {
                let rows = { build(group, scope, since, until, split).build().fetch_all(&mut *conn).await? };
                for row in &rows {
                    let key = row.opt_text("grp")?;
                    let hours = |column: &str| Ok::<_, StoreError>(row.opt_real(column)?.unwrap_or(0.0) / 3600.0);
                    match split {
                        Split::Nothing => {
                            let (name, id) = if named {
                                let id = key.as_deref().map(super::row::parse_uuid).transpose()?;
                                (row.opt_text("name")?, id)
                            } else {
                                (key.clone(), None)
                            };
                            index.insert(key, groups.len());
                            groups.push(mission_api::UsageGroup {
                                group: name,
                                id,
                                jobs: row.count("jobs")?,
                                wall_hours: hours("wall")?,
                                cpu_hours: hours("cpu")?,
                                cpu_hours_held: hours("held")?,
                                gpu_hours: hours("gpu")?,
                                memory_gb_hours: hours("memory")? / 1024.0,
                                mean_cpu_efficiency: row.opt_real("efficiency")?,
                                energy_kwh: row.opt_real("energy")?.unwrap_or(0.0),
                                co2e_g: row.opt_real("co2e")?.unwrap_or(0.0),
                                cost: Vec::new(),
                                daily: Vec::new(),
                            });
                        }
                        Split::Currency => {
                            let (Some(&i), Some(currency)) = (index.get(&key), row.opt_text("split")?) else {
                                continue;
                            };
                            let amount = row.opt_real("cost")?.unwrap_or(0.0);
                            groups[i].cost.push(mission_api::Cost { amount, currency });
                        }
                        Split::Day => {
                            let Some(&i) = index.get(&key) else { continue };
                            let day = row.opt_int("split")?.unwrap_or(0);
                            let day = from_micros(day * MICROS_A_DAY)?.date_naive();
                            groups[i].daily.push(mission_api::UsageDay {
                                day,
                                jobs: row.count("jobs")?,
                                cpu_hours_held: hours("held")?,
                                gpu_hours: hours("gpu")?,
                                energy_kwh: row.opt_real("energy")?.unwrap_or(0.0),
                                co2e_g: row.opt_real("co2e")?.unwrap_or(0.0),
                            });
                        }
                    }
                }
            }
            Ok::<_, StoreError>(())
        })?;
        // By group, the jobs without one last: the same on both backends, whatever their
        // collations and NULL orders.
        groups.sort_by(|a, b| (a.group.is_none(), &a.group, a.id).cmp(&(b.group.is_none(), &b.group, b.id)));
        Ok(groups)
    }

    /// Of `job_ids`, the jobs there are, each with its user and status.
    pub async fn job_owners_and_statuses(&self, job_ids: &[Uuid]) -> Result<Vec<(Uuid, Uuid, JobStatus)>, StoreError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        with_conn!(self, reader, |conn| {
            let mut q = QueryBuilder::new("SELECT job_id, user_id, status FROM jobs WHERE 1 = 1");
            push_any_of(&mut q, "job_id", job_ids.iter().map(Uuid::to_string));
            let rows = { q.build().fetch_all(conn).await? };
            rows.iter()
                .map(|r| Ok((r.uuid("job_id")?, r.uuid("user_id")?, parse_status(&r.text("status")?)?)))
                .collect()
        })
    }

    /// The newest job started again from `job_id` ([`Job::rerun_of`]), following reruns of
    /// reruns to the last; `None` when it was never started again.
    pub async fn newest_rerun(&self, job_id: Uuid) -> Result<Option<Uuid>, StoreError> {
        let mut newest = None;
        // A chain is as long as the reruns people asked for; the bound only guards the loop.
        for _ in 0..10_000 {
            let of = newest.unwrap_or(job_id).to_string();
            let next: Option<String> = with_conn!(self, reader, |conn| {
                sqlx::query_scalar("SELECT job_id FROM jobs WHERE rerun_of = $1 ORDER BY seq DESC LIMIT 1")
                    .bind(of)
                    .fetch_optional(conn)
                    .await?
            });
            match next {
                Some(id) => newest = Some(super::row::parse_uuid(&id)?),
                None => break,
            }
        }
        Ok(newest)
    }

    /// Up to `limit` jobs of a mission (of one user's, or anyone's) that failed or were lost
    /// and were never started again, oldest first.
    pub async fn failed_jobs_not_rerun(
        &self,
        mission_id: Uuid,
        user: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        with_conn!(self, reader, |conn: Db| {
            let mut q: QueryBuilder<Db> = QueryBuilder::new(format!(
                "SELECT {} FROM jobs WHERE status IN ('failed', 'lost') \
                 AND NOT EXISTS (SELECT 1 FROM jobs AS again WHERE again.rerun_of = jobs.job_id) AND mission_id = ",
                *JOB_COLUMNS
            ));
            q.push_bind(mission_id.to_string());
            if let Some(user) = user {
                q.push(" AND user_id = ").push_bind(user.to_string());
            }
            q.push(" ORDER BY seq LIMIT ").push_bind(i64::from(limit));
            let rows = { q.build().fetch_all(conn).await? };
            rows.iter().map(job_from_row).collect()
        })
    }

    /// Every job placed on a landing zone that has not ended, in submission order, with its
    /// sequence number (what the scheduler rebuilds the landing zones' occupancy from).
    pub async fn placed_jobs(&self) -> Result<Vec<(u64, Job)>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!(
                    "SELECT {} FROM jobs WHERE status NOT IN {FINAL_STATUSES} AND status <> 'queued' ORDER BY seq",
                    *JOB_COLUMNS
                ))
                .fetch_all(conn)
                .await?
            };
            rows.iter().map(|r| Ok((r.count("seq")?, job_from_row(r)?))).collect()
        })
    }

    /// Every queued job, in submission order, as placement needs it ([`QueuedRow`]), handed to
    /// `each` as it comes from the database: a million queued jobs are never a million rows in
    /// memory at once.
    pub async fn queued_jobs(&self, mut each: impl FnMut(QueuedRow)) -> Result<(), StoreError> {
        use futures_util::TryStreamExt;
        match &self.backend {
            // Streamed row by row, every row is a hand-off from SQLite's worker thread with each
            // of its values copied: at a million queued jobs that was most of a restart. The rows
            // come instead in pages, each page one JSON text.
            super::Backend::Sqlite(db) => {
                let mut after = 0;
                loop {
                    let page: String = {
                        let mut conn = db.reader().await;
                        sqlx::query_scalar(SQLITE_QUEUED_PAGE)
                            .bind(after)
                            .bind(QUEUED_PAGE_ROWS)
                            .fetch_one(&mut *conn)
                            .await?
                    };
                    let mut rows: Vec<QueuedRow> = serde_json::from_str(&page)
                        .map_err(|e| StoreError::Corrupt(format!("a page of queued jobs: {e}")))?;
                    // An aggregate's order is not promised; the page is read in order, so this
                    // sort finds it sorted.
                    rows.sort_unstable_by_key(|row| row.seq);
                    let Some(last) = rows.last() else { return Ok(()) };
                    after = last.seq as i64;
                    rows.into_iter().for_each(&mut each);
                }
            }
            super::Backend::Postgres(db) => {
                let mut conn = db.connection().await?;
                let mut rows = sqlx::query(concat!(
                    "SELECT ",
                    queued_columns!(),
                    " FROM jobs WHERE status = 'queued' ORDER BY seq"
                ))
                .fetch(&mut *conn);
                while let Some(r) = rows.try_next().await? {
                    let gang = r.opt_json::<mission_api::JobGang>("gang")?;
                    each(QueuedRow {
                        seq: r.count("seq")?,
                        job_id: r.uuid("job_id")?,
                        user_id: r.uuid("user_id")?,
                        project_id: r.uuid("project_id")?,
                        station_id: r.uuid("station_id")?,
                        requested_lz_id: r.opt_uuid("requested_lz_id")?,
                        cpu_count: r.int("cpu_count")? as u32,
                        memory_amount: r.count("memory_amount")?,
                        gpu_count: r.int("gpu_count")? as u32,
                        attempt: r.count("attempt")? as u32,
                        retry: r.opt_json("retry")?,
                        after_ok: r.json("after_ok")?,
                        after_any: r.json("after_any")?,
                        time_limit: r.opt_int("time_limit")?.map(|minutes| minutes as u32),
                        ran: r.flag("ran")?,
                        image_id: r.opt_uuid("image_id")?,
                        workdir: r.opt_json::<mission_api::JobBatch>("batch")?.map(|batch| batch.workdir),
                        after_not_ok: r.opt_json("after_not_ok")?.unwrap_or_default(),
                        held: r.opt_text("pending_kind")?.as_deref() == Some(mission_api::PendingKind::Held.as_str()),
                        disk_mb: r.opt_json::<mission_api::tes::JobTask>("task")?.map_or(0, |task| task.disk_mb),
                        nodes: gang.as_ref().map_or(1, |gang| gang.nodes),
                        launch_first: gang.is_some_and(|gang| gang.launch == mission_api::Launch::First),
                        requeue: r.flag("requeue")?,
                    });
                }
                Ok(())
            }
        }
    }

    /// What the jobs that ended within `horizon` used, per project and user, summed over
    /// `bucket`s of time: CPUs plus GPUs times wall time (where an agent did not report the wall
    /// time, the time between start and end). Fair-share order starts from these at a restart.
    pub async fn used_since(&self, horizon: Duration, bucket: Duration) -> Result<Vec<UsedRow>, StoreError> {
        let now = super::to_micros(super::now());
        let since = now.saturating_sub(i64::try_from(horizon.as_micros()).unwrap_or(i64::MAX));
        let bucket = i64::try_from(bucket.as_micros()).unwrap_or(i64::MAX).max(1);
        let query = concat!(
            "SELECT project_id, user_id, finished_at / $1 AS bucket, MAX(finished_at) AS last, \
            SUM((cpu_count + gpu_count) * COALESCE(wall_time, (finished_at - started_at) / 1000000.0, 0.0)) AS used \
            FROM jobs WHERE finished_at >= $2 AND status IN ",
            final_statuses!(),
            " GROUP BY project_id, user_id, finished_at / $1"
        );
        with_conn!(self, reader, |conn| {
            let rows = { sqlx::query(query).bind(bucket).bind(since).fetch_all(conn).await? };
            rows.iter()
                .map(|r| {
                    Ok(UsedRow {
                        project_id: r.uuid("project_id")?,
                        user_id: r.uuid("user_id")?,
                        used: r.opt_real("used")?.unwrap_or(0.0),
                        seconds_ago: (now - r.int("last")?) as f64 / 1e6,
                    })
                })
                .collect()
        })
    }

    /// The id of the job numbered `number`, if there is one.
    pub async fn job_numbered(&self, number: u64) -> Result<Option<Uuid>, StoreError> {
        let Ok(number) = i64::try_from(number) else { return Ok(None) };
        let id: Option<String> = with_conn!(self, reader, |conn| {
            sqlx::query_scalar("SELECT job_id FROM jobs WHERE seq = $1").bind(number).fetch_optional(conn).await?
        });
        id.map(|id| Uuid::parse_str(&id).map_err(|_| StoreError::Corrupt(format!("job id {id:?}")))).transpose()
    }

    /// The sequence number the next job is given: one past the last job's.
    pub async fn next_job_seq(&self) -> Result<u64, StoreError> {
        let last: Option<i64> =
            with_conn!(self, reader, |conn| sqlx::query_scalar("SELECT MAX(seq) FROM jobs").fetch_one(conn).await?);
        Ok(last.map_or(1, |n| n as u64 + 1))
    }

    /// Where each of `job_ids` that is queued stands in line, counted in the database: what a
    /// replica that does not run the scheduler answers (the scheduler counts its own, in memory).
    pub async fn queue_positions(&self, job_ids: &[Uuid]) -> Result<HashMap<Uuid, QueuePosition>, StoreError> {
        if job_ids.is_empty() {
            return Ok(HashMap::new());
        }
        with_conn!(self, reader, |conn| {
            let mut q = QueryBuilder::new(QUEUE_POSITIONS);
            push_any_of(&mut q, "j.job_id", job_ids.iter().map(Uuid::to_string));
            let rows = { q.build().fetch_all(conn).await? };
            rows.iter()
                .map(|r| {
                    let position = QueuePosition { station: r.count("station")? + 1, own: r.count("own")? + 1 };
                    Ok((r.uuid("job_id")?, position))
                })
                .collect()
        })
    }

    /// How many jobs of a mission have not ended.
    pub async fn mission_unfinished_jobs(&self, mission_id: Uuid) -> Result<u64, StoreError> {
        let n: i64 = with_conn!(self, reader, |conn| {
            sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM jobs WHERE mission_id = $1 AND status NOT IN {FINAL_STATUSES}"
            ))
            .bind(mission_id.to_string())
            .fetch_one(conn)
            .await?
        });
        Ok(n as u64)
    }

    /// Records (or replaces) a result file of a job; `record.mission_id` is ignored.
    pub async fn insert_job_result(&self, job_id: Uuid, record: &FileRecord) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "INSERT INTO job_results (job_id, path, size, sha256, e_tag, modified_at) \
                 VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (job_id, path) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, \
                 e_tag = excluded.e_tag, modified_at = excluded.modified_at",
            )
            .bind(job_id.to_string())
            .bind(&record.path)
            .bind(record.size as i64)
            .bind(&record.sha256)
            .bind(&record.e_tag)
            .bind(to_micros(record.modified_at))
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// The result files of a job (without its logs), by path; `mission_id` and `user_id` of the
    /// records are the job's.
    pub async fn job_results(&self, job: &Job) -> Result<Vec<FileRecord>, StoreError> {
        self.job_results_at(job, None).await
    }

    /// The result file `path` of a job.
    pub async fn job_result(&self, job: &Job, path: &str) -> Result<Option<FileRecord>, StoreError> {
        Ok(self.job_results_at(job, Some(path)).await?.pop())
    }

    async fn job_results_at(&self, job: &Job, path: Option<&str>) -> Result<Vec<FileRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(
                    "SELECT path, size, sha256, e_tag, modified_at FROM job_results WHERE job_id = $1 \
                     AND (CAST($2 AS TEXT) IS NULL OR path = $2) ORDER BY path",
                )
                .bind(job.job_id.to_string())
                .bind(path)
                .fetch_all(conn)
                .await?
            };
            rows.iter()
                .map(|r| {
                    Ok(FileRecord {
                        mission_id: job.mission_id,
                        path: r.text("path")?,
                        user_id: job.user_id,
                        size: r.count("size")?,
                        sha256: r.text("sha256")?,
                        e_tag: r.opt_text("e_tag")?,
                        modified_at: r.time("modified_at")?,
                    })
                })
                .collect()
        })
    }

    /// The landing zone whose agent token hashes to `token_hash`.
    pub async fn lz_by_token_hash(&self, token_hash: &str) -> Result<Option<LzIdentity>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query("SELECT lz_id, station_id, name, cluster_account FROM landing_zones WHERE token_hash = $1")
                    .bind(token_hash)
                    .fetch_optional(conn)
                    .await?
            };
            row.map(|r| {
                Ok(LzIdentity {
                    lz_id: r.uuid("lz_id")?,
                    station_id: r.uuid("station_id")?,
                    name: r.text("name")?,
                    cluster_account: r.opt_text("cluster_account")?,
                })
            })
            .transpose()
        })
    }

    /// Records what an agent advertised on connecting (its resources, whether it takes images),
    /// and that it was seen `now`.
    pub async fn lz_connected(
        &self,
        lz_id: Uuid,
        resources: Resources,
        images: bool,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "UPDATE landing_zones SET cpu_count = $1, memory_amount = $2, gpu_count = $3, last_seen_at = $4, \
                 images = $5 WHERE lz_id = $6",
            )
            .bind(i64::from(resources.cpu_count))
            .bind(resources.memory_amount as i64)
            .bind(i64::from(resources.gpu_count))
            .bind(to_micros(now))
            .bind(images)
            .bind(lz_id.to_string())
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// Records that an agent was heard from `now`.
    pub async fn lz_seen(&self, lz_id: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("UPDATE landing_zones SET last_seen_at = $1 WHERE lz_id = $2")
                .bind(to_micros(now))
                .bind(lz_id.to_string())
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Gives the landing zone `name` of a station a new agent token (registering it if new);
    /// answers its id. The embedded LZ gets a fresh token on every server start this way.
    pub async fn rotate_lz_token(
        &self,
        station_id: Uuid,
        name: &str,
        token_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Uuid, StoreError> {
        let id: String = with_conn!(self, writer, |conn| {
            {
                sqlx::query_scalar(
                    "INSERT INTO landing_zones (lz_id, station_id, name, token_hash, created_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (station_id, name) DO UPDATE SET token_hash = excluded.token_hash RETURNING lz_id",
                )
                .bind(Uuid::new_v4().to_string())
                .bind(station_id.to_string())
                .bind(name)
                .bind(token_hash)
                .bind(to_micros(now))
                .fetch_one(conn)
                .await?
            }
        });
        super::row::parse_uuid(&id)
    }
}

/// What [`Store::save_jobs`] runs on SQLite, with four JSON arrays for its parameters: new job
/// rows (in submission order), the changes to job rows (one per job, the batch's moves of it
/// folded together), the pending reasons of queued jobs, and the history rows to append. A history row's `n` is given where the batch knows
/// it (new jobs); otherwise it follows the job's rows already stored, `k` being its place among
/// the batch's rows of that job. (SQLite reads a table an `INSERT … SELECT` writes into before it
/// writes, so the count is that of the rows stored before the statement.) The history rows, given
/// again, become the `job.*` events, as [`POSTGRES_JOB_EVENTS`] says. Every join starts from the
/// batch and finds each job by its id: `+jobs.status` keeps SQLite's planner (which has no
/// statistics) from walking every queued job by status and reading the batch once per job.
static SQLITE_SAVE_JOBS: LazyLock<String> =
    LazyLock::new(|| format!("BEGIN IMMEDIATE;\n{};\n{SQLITE_SAVE_JOBS_AFTER_INSERT}", sqlite_insert_jobs()));

/// The statements of [`SQLITE_SAVE_JOBS`] after its insert.
const SQLITE_SAVE_JOBS_AFTER_INSERT: &str = concat!(
    sqlite_rows!("c", "?"),
    "UPDATE jobs SET status = c.value ->> 'status', \
    attempt = COALESCE(c.value ->> 'attempt', jobs.attempt), \
    memory_amount = COALESCE(c.value ->> 'memory_amount', jobs.memory_amount), \
    lz_id = IIF(json_type(c.value, '$.lz_id') IS NULL, jobs.lz_id, c.value ->> 'lz_id'), \
    gang = IIF(json_type(c.value, '$.node_lz_ids') IS NULL, jobs.gang, \
        json_set(jobs.gang, '$.lz_ids', json(c.value -> 'node_lz_ids'))), \
    gpu_indices = COALESCE(c.value ->> 'gpu_indices', jobs.gpu_indices), \
    exit_code = COALESCE(c.value ->> 'exit_code', jobs.exit_code), \
    reason = IIF(json_type(c.value, '$.reason') IS NULL, jobs.reason, c.value ->> 'reason'), \
    pending_kind = IIF(json_type(c.value, '$.pending_kind') IS NULL, jobs.pending_kind, c.value ->> 'pending_kind'), \
    pending_detail = IIF(json_type(c.value, '$.pending_kind') IS NULL, jobs.pending_detail, \
        c.value ->> 'pending_detail'), \
    limits = COALESCE(c.value ->> 'limits', jobs.limits), \
    wall_time = COALESCE(c.value ->> 'wall_time', jobs.wall_time), \
    cpu_time = COALESCE(c.value ->> 'cpu_time', jobs.cpu_time), \
    peak_memory = COALESCE(c.value ->> 'peak_memory', jobs.peak_memory), \
    energy_kwh = COALESCE(c.value ->> 'energy_kwh', jobs.energy_kwh), \
    co2e_g = COALESCE(c.value ->> 'co2e_g', jobs.co2e_g), \
    cost = COALESCE(c.value ->> 'cost', jobs.cost), \
    currency = COALESCE(c.value ->> 'currency', jobs.currency), \
    energy_parts = COALESCE(c.value ->> 'energy_parts', jobs.energy_parts), \
    started_at = IIF(json_type(c.value, '$.started_at') IS NULL, jobs.started_at, c.value ->> 'started_at'), \
    ran = COALESCE(c.value ->> 'ran', jobs.ran), \
    finished_at = COALESCE(c.value ->> 'finished_at', jobs.finished_at) \
FROM c WHERE jobs.job_id = c.value ->> 'job_id';\n",
    sqlite_rows!("p", "?"),
    "UPDATE jobs SET pending_kind = p.value ->> 'kind', pending_detail = p.value ->> 'detail' \
FROM p WHERE jobs.job_id = p.value ->> 'job_id' AND +jobs.status = 'queued';\n",
    sqlite_rows!("h", "?"),
    "INSERT INTO job_history (job_id, n, status, at, detail) \
SELECT h.value ->> 'job_id', \
    COALESCE(h.value ->> 'n', (SELECT COUNT(*) FROM job_history WHERE job_id = h.value ->> 'job_id') + (h.value ->> 'k')), \
    h.value ->> 'status', h.value ->> 'at', h.value ->> 'detail' \
FROM h;\n",
    sqlite_rows!("h", "?"),
    "INSERT INTO events (at, kind, user_id, mission_id, job_id, data) \
SELECT h.value ->> 'at', 'job.' || (h.value ->> 'status'), jobs.user_id, jobs.mission_id, jobs.job_id, \
    json_object('status', h.value ->> 'status', 'detail', h.value ->> 'detail', 'station_id', jobs.station_id, \
        'lz_id', jobs.lz_id, \
        'exit_code', IIF(h.value ->> 'status' IN ",
    final_statuses!(),
    ", jobs.exit_code, NULL), \
        'reason', IIF(h.value ->> 'status' IN ",
    final_statuses!(),
    ", jobs.reason, NULL)) \
FROM h JOIN jobs ON jobs.job_id = h.value ->> 'job_id' ORDER BY h.key RETURNING ",
    super::events::event_columns!(),
    ";\n",
    super::events::sqlite_append_events!("?"),
    " RETURNING ",
    super::events::event_columns!(),
    ";\n",
    super::audit::sqlite_append_audit!("?"),
    ";\nCOMMIT;"
);

/// The `job.*` events of a batch's history rows (the fourth statement of its transaction, after
/// [`super::events::POSTGRES_EVENTS_LOCK`]): one per transition, in the batch's order, with the
/// job's exit code and reason once it has ended.
const POSTGRES_JOB_EVENTS: &str = concat!(
    "INSERT INTO events (at, kind, user_id, mission_id, job_id, data) \
SELECT (h ->> 'at')::bigint, 'job.' || (h ->> 'status'), jobs.user_id, jobs.mission_id, jobs.job_id, \
    jsonb_build_object('status', h ->> 'status', 'detail', h ->> 'detail', 'station_id', jobs.station_id, \
        'lz_id', jobs.lz_id, \
        'exit_code', CASE WHEN h ->> 'status' IN ",
    final_statuses!(),
    " THEN jobs.exit_code END, \
        'reason', CASE WHEN h ->> 'status' IN ",
    final_statuses!(),
    " THEN jobs.reason END)::text \
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS history (h, k) JOIN jobs ON jobs.job_id = h ->> 'job_id' \
ORDER BY k"
);

/// The second statement of [`POSTGRES_INSERT_JOBS`]'s transaction.
const POSTGRES_CHANGE_JOBS: &str = "UPDATE jobs SET status = c ->> 'status', \
    attempt = COALESCE((c ->> 'attempt')::bigint, jobs.attempt), \
    memory_amount = COALESCE((c ->> 'memory_amount')::bigint, jobs.memory_amount), \
    lz_id = CASE WHEN c ? 'lz_id' THEN c ->> 'lz_id' ELSE jobs.lz_id END, \
    gang = CASE WHEN c ? 'node_lz_ids' AND jobs.gang IS NOT NULL \
        THEN jsonb_set(jobs.gang::jsonb, '{lz_ids}', c -> 'node_lz_ids')::text ELSE jobs.gang END, \
    gpu_indices = COALESCE(c ->> 'gpu_indices', jobs.gpu_indices), \
    exit_code = COALESCE((c ->> 'exit_code')::bigint, jobs.exit_code), \
    reason = CASE WHEN c ? 'reason' THEN c ->> 'reason' ELSE jobs.reason END, \
    pending_kind = CASE WHEN c ? 'pending_kind' THEN c ->> 'pending_kind' ELSE jobs.pending_kind END, \
    pending_detail = CASE WHEN c ? 'pending_kind' THEN c ->> 'pending_detail' ELSE jobs.pending_detail END, \
    limits = COALESCE(c ->> 'limits', jobs.limits), \
    wall_time = COALESCE((c ->> 'wall_time')::double precision, jobs.wall_time), \
    cpu_time = COALESCE((c ->> 'cpu_time')::double precision, jobs.cpu_time), \
    peak_memory = COALESCE((c ->> 'peak_memory')::bigint, jobs.peak_memory), \
    energy_kwh = COALESCE((c ->> 'energy_kwh')::double precision, jobs.energy_kwh), \
    co2e_g = COALESCE((c ->> 'co2e_g')::double precision, jobs.co2e_g), \
    cost = COALESCE((c ->> 'cost')::double precision, jobs.cost), \
    currency = COALESCE(c ->> 'currency', jobs.currency), \
    energy_parts = COALESCE(c ->> 'energy_parts', jobs.energy_parts), \
    started_at = CASE WHEN c ? 'started_at' THEN (c ->> 'started_at')::bigint ELSE jobs.started_at END, \
    ran = COALESCE((c ->> 'ran')::boolean, jobs.ran), \
    finished_at = COALESCE((c ->> 'finished_at')::bigint, jobs.finished_at) \
FROM jsonb_array_elements($1::jsonb) AS change (c) WHERE jobs.job_id = c ->> 'job_id'";

/// The third statement of [`POSTGRES_INSERT_JOBS`]'s transaction: pending reasons of jobs still
/// queued (a job placed by the same batch has left the queue, and its reason with it).
const POSTGRES_PENDING: &str = "UPDATE jobs SET pending_kind = p ->> 'kind', pending_detail = p ->> 'detail' \
FROM jsonb_array_elements($1::jsonb) AS pending (p) WHERE jobs.job_id = p ->> 'job_id' AND jobs.status = 'queued'";

/// The fourth statement of [`POSTGRES_INSERT_JOBS`]'s transaction.
const POSTGRES_APPEND_HISTORY: &str = "INSERT INTO job_history (job_id, n, status, at, detail) \
SELECT h ->> 'job_id', \
    COALESCE((h ->> 'n')::bigint, \
        (SELECT COUNT(*) FROM job_history WHERE job_id = h ->> 'job_id') + (h ->> 'k')::bigint), \
    h ->> 'status', (h ->> 'at')::bigint, h ->> 'detail' \
FROM jsonb_array_elements($1::jsonb) AS history (h)";

/// A batch of [`Store::save_jobs`] as JSON parameters.
struct JobBatch {
    jobs: String,
    changes: String,
    pending: String,
    history: String,
}

/// A job row's change: fields left out keep their value (`Some(None)` writes NULL).
#[derive(serde::Serialize)]
struct JobChange {
    job_id: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_amount: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lz_id: Option<Option<String>>,
    /// A gang's landing zones, in rank order (empty as it goes back in line).
    #[serde(skip_serializing_if = "Option::is_none")]
    node_lz_ids: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_indices: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<Option<String>>,
    /// Given (with the detail, which may be NULL), or left out to keep both.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_kind: Option<Option<&'static str>>,
    pending_detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wall_time: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_time: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_memory: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    energy_kwh: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    co2e_g: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    currency: Option<String>,
    /// [`mission_api::EnergyParts`] as JSON text.
    #[serde(skip_serializing_if = "Option::is_none")]
    energy_parts: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<Option<i64>>,
    /// Set as it enters `running`, never cleared.
    #[serde(skip_serializing_if = "Option::is_none")]
    ran: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<i64>,
}

impl JobBatch {
    fn new(inserts: &[(u64, Job)], updates: &[JobUpdate], pending: &[(Uuid, Option<PendingReason>)]) -> Self {
        let mut jobs = Vec::with_capacity(inserts.len());
        let mut history = Vec::new();
        // Per job of the batch: the history rows it has (new jobs) or the batch added so far.
        let mut rows_of: HashMap<Uuid, (bool, usize)> = HashMap::new();
        let history_row = |job_id: Uuid, n: Option<usize>, k: usize, t: &JobTransition| {
            serde_json::json!({
                "job_id": job_id.to_string(),
                "n": n,
                "k": k,
                "status": t.status.as_str(),
                "at": to_micros(t.at),
                "detail": t.detail,
            })
        };
        for (seq, job) in inserts {
            jobs.push(insert_row(*seq, job));
            for (n, t) in job.history.iter().enumerate() {
                history.push(history_row(job.job_id, Some(n), 0, t));
            }
            rows_of.insert(job.job_id, (true, job.history.len()));
        }
        let mut changes: Vec<JobChange> = Vec::new();
        let mut change_of: HashMap<Uuid, usize> = HashMap::new();
        for u in updates {
            let i = *change_of.entry(u.job_id).or_insert_with(|| {
                changes.push(JobChange {
                    job_id: u.job_id.to_string(),
                    status: u.status.as_str(),
                    attempt: None,
                    memory_amount: None,
                    lz_id: None,
                    node_lz_ids: None,
                    gpu_indices: None,
                    exit_code: None,
                    reason: None,
                    pending_kind: None,
                    pending_detail: None,
                    limits: None,
                    wall_time: None,
                    cpu_time: None,
                    peak_memory: None,
                    energy_kwh: None,
                    co2e_g: None,
                    cost: None,
                    currency: None,
                    energy_parts: None,
                    started_at: None,
                    ran: None,
                    finished_at: None,
                });
                changes.len() - 1
            });
            let change = &mut changes[i];
            let at = to_micros(u.at);
            change.status = u.status.as_str();
            change.attempt = u.attempt.or(change.attempt);
            change.memory_amount = u.memory_amount.or(change.memory_amount);
            if let Some(lz) = u.lz_id {
                change.lz_id = Some(lz.map(|id| id.to_string()));
            }
            if let Some(nodes) = &u.node_lz_ids {
                change.node_lz_ids = Some(nodes.iter().map(Uuid::to_string).collect());
            }
            if let Some(gpus) = &u.gpu_indices {
                change.gpu_indices = Some(join_indices(gpus));
            }
            change.exit_code = u.exit_code.or(change.exit_code);
            // A reason says why a job is where it is: one that starts running has none left.
            if let Some(reason) = &u.reason {
                change.reason = Some(Some(reason.clone()));
            } else if u.status == JobStatus::Running {
                change.reason = Some(None);
            }
            if let Some(reason) = &u.pending {
                change.pending_kind = Some(Some(reason.kind.as_str()));
                change.pending_detail = Some(reason.detail.clone());
            } else if u.status != JobStatus::Queued {
                change.pending_kind = Some(None);
                change.pending_detail = None;
            }
            change.limits = u.limits.clone().or(change.limits.take());
            if let Some(usage) = &u.usage {
                change.wall_time = Some(usage.wall_time);
                change.cpu_time = usage.cpu_time;
                change.peak_memory = usage.peak_memory;
                change.energy_kwh = usage.energy_kwh;
                change.co2e_g = usage.co2e_g;
                change.cost = usage.cost.as_ref().map(|c| c.amount);
                change.currency = usage.cost.as_ref().map(|c| c.currency.clone());
                change.energy_parts = usage.energy_parts.as_ref().map(energy_parts_text);
            }
            match u.status {
                JobStatus::Running => {
                    change.started_at = Some(Some(at));
                    change.ran = Some(true);
                }
                JobStatus::Queued => change.started_at = Some(None),
                s if s.is_final() => change.finished_at = Some(at),
                _ => {}
            }
            let (known, rows) = rows_of.entry(u.job_id).or_insert((false, 0));
            let transition = JobTransition { status: u.status, at: u.at, detail: u.detail.clone() };
            history.push(if *known {
                history_row(u.job_id, Some(*rows), 0, &transition)
            } else {
                history_row(u.job_id, None, *rows, &transition)
            });
            *rows += 1;
        }
        let pending: Vec<_> = pending
            .iter()
            .map(|(job_id, reason)| {
                serde_json::json!({
                    "job_id": job_id.to_string(),
                    "kind": reason.as_ref().map(|r| r.kind.as_str()),
                    "detail": reason.as_ref().map(|r| &r.detail),
                })
            })
            .collect();
        Self {
            jobs: serde_json::to_string(&jobs).expect("JSON values serialise"),
            changes: serde_json::to_string(&changes).expect("job changes serialise"),
            pending: serde_json::to_string(&pending).expect("JSON values serialise"),
            history: serde_json::to_string(&history).expect("JSON values serialise"),
        }
    }
}

/// A new job's row, as the inserts of [`JOB_ROW`] read it: one key per column.
fn insert_row(seq: u64, job: &Job) -> serde_json::Value {
    let usage = job.usage.as_ref();
    serde_json::json!({
        "seq": seq,
        "job_id": job.job_id.to_string(),
        "mission_id": job.mission_id.to_string(),
        "user_id": job.user_id.to_string(),
        "project_id": job.project_id.to_string(),
        "station_id": job.station_id.to_string(),
        "requested_lz_id": job.requested_lz_id.map(|id| id.to_string()),
        "lz_id": job.lz_id.map(|id| id.to_string()),
        "status": job.status.as_str(),
        "cpu_count": job.cpu_count,
        "memory_amount": job.memory_amount,
        "gpu_count": job.gpu_count,
        "time_limit": job.time_limit,
        "gpu_indices": join_indices(&job.gpu_indices),
        "command": serde_json::to_string(&job.command).expect("strings serialise"),
        "labels": serde_json::to_string(&job.labels).expect("strings serialise"),
        "log_cap": job.log_cap,
        "log_truncated": job.log_truncated,
        "after_ok": serde_json::to_string(&job.after_ok).expect("ids serialise"),
        "after_any": serde_json::to_string(&job.after_any).expect("ids serialise"),
        "after_not_ok": (!job.after_not_ok.is_empty())
            .then(|| serde_json::to_string(&job.after_not_ok).expect("ids serialise")),
        "pending_kind": job.pending_reason.as_ref().map(|p| p.kind.as_str()),
        "pending_detail": job.pending_reason.as_ref().map(|p| &p.detail),
        "retry": job.retry.as_ref().map(|r| serde_json::to_string(r).expect("policies serialise")),
        "image_id": job.image.as_ref().map(|i| i.image_id.to_string()),
        "image_digest": job.image.as_ref().map(|i| &i.digest),
        "image_reference": job.image.as_ref().and_then(|i| i.reference.as_ref()),
        "attempt": job.attempt,
        "rerun_of": job.rerun_of.map(|id| id.to_string()),
        "array_id": job.array_id.map(|id| id.to_string()),
        "array_index": job.array_index,
        "array_seq": job.array_number,
        "batch": job.batch.as_ref().map(|batch| serde_json::to_string(batch).expect("a batch serialises")),
        "task": job.task.as_ref().map(|task| serde_json::to_string(task).expect("a task serialises")),
        "gang": job.gang.as_ref().map(|gang| serde_json::to_string(gang).expect("a gang serialises")),
        "signal": job.signal.as_ref().map(|signal| serde_json::to_string(signal).expect("a signal serialises")),
        "requeue": job.requeue,
        "stop_ordered_at": job.stop_ordered_at.map(to_micros),
        "session": job.session.as_ref().map(|session| serde_json::to_string(&session.request()).expect("requests serialise")),
        "session_url": job.session.as_ref().and_then(|session| session.url.as_ref()),
        "session_ready_at": job.session.as_ref().and_then(|session| session.ready_at).map(to_micros),
        "exit_code": job.exit_code,
        "reason": job.reason,
        "limits": job.limits,
        "wall_time": usage.map(|u| u.wall_time),
        "cpu_time": usage.and_then(|u| u.cpu_time),
        "peak_memory": usage.and_then(|u| u.peak_memory),
        "energy_kwh": usage.and_then(|u| u.energy_kwh),
        "co2e_g": usage.and_then(|u| u.co2e_g),
        "cost": usage.and_then(|u| u.cost.as_ref()).map(|c| c.amount),
        "currency": usage.and_then(|u| u.cost.as_ref()).map(|c| c.currency.as_str()),
        "energy_parts": usage.and_then(|u| u.energy_parts.as_ref()).map(energy_parts_text),
        "created_at": to_micros(job.created_at),
        "started_at": job.started_at.map(to_micros),
        "finished_at": job.finished_at.map(to_micros),
    })
}

fn energy_parts_text(parts: &mission_api::EnergyParts) -> String {
    serde_json::to_string(parts).expect("energy parts serialise")
}

fn join_indices(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn parse_status(s: &str) -> Result<JobStatus, StoreError> {
    s.parse().map_err(StoreError::Corrupt)
}

/// A job's pending reason as stored (a placement pass writes it for the jobs it looked at).
fn pending_from_row(r: &impl Columns) -> Result<Option<PendingReason>, StoreError> {
    let Some(kind) = r.opt_text("pending_kind")? else { return Ok(None) };
    let kind: PendingKind = kind.parse().map_err(StoreError::Corrupt)?;
    Ok(Some(PendingReason { kind, detail: r.opt_text("pending_detail")?.unwrap_or_default() }))
}

pub(super) fn job_from_row(r: &impl Columns) -> Result<Job, StoreError> {
    let gpu_indices = r
        .text("gpu_indices")?
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| StoreError::Corrupt(format!("gpu index {s:?}"))))
        .collect::<Result<_, _>>()?;
    let exit_code = r
        .opt_int("exit_code")?
        .map(|code| i32::try_from(code).map_err(|_| StoreError::Corrupt(format!("exit code {code}"))))
        .transpose()?;
    let cpu_count = r.int("cpu_count")? as u32;
    let status = parse_status(&r.text("status")?)?;
    let session = match r.opt_json::<mission_api::SessionRequest>("session")? {
        Some(request) => Some(mission_api::JobSession {
            // Where it is opened, while it runs.
            url: r.opt_text("session_url")?.filter(|_| status == JobStatus::Running),
            ready_at: r.opt_time("session_ready_at")?,
            ..mission_api::JobSession::requested(request)
        }),
        None => None,
    };
    let usage = r.opt_real("wall_time")?.map(|wall_time| {
        Ok::<_, StoreError>(
            mission_api::JobUsage {
                wall_time,
                cpu_time: r.opt_real("cpu_time")?,
                cpu_efficiency: None,
                peak_memory: r.opt_int("peak_memory")?.map(|mb| mb as u64),
                energy_kwh: r.opt_real("energy_kwh")?,
                co2e_g: r.opt_real("co2e_g")?,
                cost: match (r.opt_real("cost")?, r.opt_text("currency")?) {
                    (Some(amount), Some(currency)) => Some(mission_api::Cost { amount, currency }),
                    _ => None,
                },
                energy_parts: r.opt_text("energy_parts")?.and_then(|text| serde_json::from_str(&text).ok()),
            }
            .with_efficiency(cpu_count),
        )
    });
    Ok(Job {
        job_id: r.uuid("job_id")?,
        number: r.count("seq")?,
        mission_id: r.uuid("mission_id")?,
        user_id: r.uuid("user_id")?,
        project_id: r.uuid("project_id")?,
        station_id: r.uuid("station_id")?,
        requested_lz_id: r.opt_uuid("requested_lz_id")?,
        lz_id: r.opt_uuid("lz_id")?,
        status,
        cpu_count,
        memory_amount: r.count("memory_amount")?,
        gpu_count: r.int("gpu_count")? as u32,
        time_limit: r.opt_int("time_limit")?.map(|minutes| minutes as u32),
        gpu_indices,
        command: r.json("command")?,
        labels: r.json("labels")?,
        log_cap: r.opt_int("log_cap")?.map(|cap| cap as u64),
        log_truncated: r.flag("log_truncated")?,
        after_ok: r.json("after_ok")?,
        after_any: r.json("after_any")?,
        after_not_ok: r.opt_json("after_not_ok")?.unwrap_or_default(),
        retry: r.opt_json("retry")?,
        image: match (r.opt_uuid("image_id")?, r.opt_text("image_digest")?) {
            (Some(image_id), Some(digest)) => {
                Some(mission_api::JobImage { image_id, digest, reference: r.opt_text("image_reference")? })
            }
            _ => None,
        },
        attempt: r.count("attempt")? as u32,
        rerun_of: r.opt_uuid("rerun_of")?,
        array_id: r.opt_uuid("array_id")?,
        array_index: r.opt_int("array_index")?.map(|i| i as u32),
        array_number: r.opt_int("array_seq")?.map(|n| n as u64),
        batch: r.opt_json("batch")?,
        task: r.opt_json("task")?,
        gang: r.opt_json("gang")?,
        signal: r.opt_json("signal")?,
        requeue: r.flag("requeue")?,
        stop_ordered_at: r.opt_time("stop_ordered_at")?,
        session,
        pending_reason: pending_from_row(r)?,
        position: None,
        exit_code,
        reason: r.opt_text("reason")?,
        limits: r.opt_text("limits")?,
        usage: usage.transpose()?,
        history: Vec::new(),
        created_at: r.time("created_at")?,
        started_at: r.opt_time("started_at")?,
        finished_at: r.opt_time("finished_at")?,
    })
}

/// What placement needs of a queued job, as [`Store::queued_jobs`] streams it.
#[derive(Debug, serde::Deserialize)]
pub struct QueuedRow {
    /// Its place in line.
    pub seq: u64,
    /// The job.
    pub job_id: Uuid,
    /// Whose.
    pub user_id: Uuid,
    /// The project it is charged to.
    pub project_id: Uuid,
    /// Its station.
    pub station_id: Uuid,
    /// The landing zone it names.
    pub requested_lz_id: Option<Uuid>,
    /// CPUs it asks for.
    pub cpu_count: u32,
    /// Megabytes it asks for.
    pub memory_amount: u64,
    /// GPUs it asks for.
    pub gpu_count: u32,
    /// Its attempt.
    pub attempt: u32,
    /// Its retry policy.
    pub retry: Option<RetryPolicy>,
    /// Jobs it waits for to complete.
    pub after_ok: Vec<Uuid>,
    /// Jobs it waits for to end.
    pub after_any: Vec<Uuid>,
    /// Minutes it may run.
    pub time_limit: Option<u32>,
    /// Whether it ran before (it went back in line after running).
    pub ran: bool,
    /// The container image it runs in: only landing zones that take images may hold it.
    pub image_id: Option<Uuid>,
    /// A batch job's directory: only landing zones that share it may hold it.
    pub workdir: Option<String>,
    /// Jobs it waits for to end without completing.
    pub after_not_ok: Vec<Uuid>,
    /// Its user holds it (its pending reason is `held`).
    pub held: bool,
    /// Megabytes of disk it needs free ([`mission_api::tes::JobTask::disk_mb`]).
    #[serde(default)]
    pub disk_mb: u64,
    /// How many landing zones it runs on at once ([`mission_api::JobGang::nodes`]).
    #[serde(default = "one_node")]
    pub nodes: u32,
    /// It runs its command on its first node only ([`mission_api::Launch::First`]).
    #[serde(default)]
    pub launch_first: bool,
    /// It goes back in line when its time limit, a reclaim or a node's failure ends it.
    #[serde(default)]
    pub requeue: bool,
}

/// The landing zones a job runs on unless it asks for more.
fn one_node() -> u32 {
    1
}

/// How [`Store::usage_by`] groups jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageGrouping {
    /// By the project they were charged to.
    Project,
    /// By whose they are.
    User,
    /// By their value of a label (its key checked by the caller).
    Label(String),
}

/// Whose jobs [`Store::usage_by`] sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsageScope {
    /// Everyone's.
    All,
    /// A user's own, and every job charged to the projects they manage.
    Own {
        /// The user.
        user_id: Uuid,
        /// The projects they manage.
        managed: Vec<Uuid>,
    },
    /// Every job charged to one project (for those who may read them: its members).
    Project(Uuid),
}

/// What the jobs of one project and user that ended at about the same time used, as
/// [`Store::used_since`] sums it.
#[derive(Debug, Clone, PartialEq)]
pub struct UsedRow {
    /// The project the jobs were charged to.
    pub project_id: Uuid,
    /// Whose jobs.
    pub user_id: Uuid,
    /// Their CPUs plus GPUs times their wall times, in seconds.
    pub used: f64,
    /// How long ago they ended, in seconds.
    pub seconds_ago: f64,
}

/// A job an agent reports the end of, as [`Store::ending_jobs`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndingJob {
    /// The job.
    pub job_id: Uuid,
    /// Its mission.
    pub mission_id: Uuid,
    /// Whether its output passed its log cap (its logs are then sealed before the end is recorded).
    pub log_truncated: bool,
    /// How many landing zones it runs on (each with logs of its own).
    pub nodes: u32,
    /// The mission's destination cargo bay, where its logs are copied beside its other results.
    pub destination_storage_id: Option<Uuid>,
}

/// The `WHERE` clause of a [`JobFilter`] (its page aside).
fn job_conditions<'q, DB>(q: &mut QueryBuilder<'q, DB>, f: &JobFilter)
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    q.push(" WHERE 1 = 1");
    if let Some(user) = f.user {
        q.push(" AND user_id = ").push_bind(user.to_string());
    }
    if let Some(seq) = f.seq_at_most {
        q.push(" AND seq <= ").push_bind(i64::try_from(seq).unwrap_or(i64::MAX));
    }
    push_any_of(q, "mission_id", f.mission_ids.iter().map(Uuid::to_string));
    push_any_of(q, "station_id", f.station_ids.iter().map(Uuid::to_string));
    push_any_of(q, "project_id", f.project_ids.iter().map(Uuid::to_string));
    push_any_of(q, "array_id", f.array_ids.iter().map(Uuid::to_string));
    push_any_of(q, "status", f.statuses.iter().map(|s| s.as_str().to_owned()));
    push_labels(q, &f.labels);
    if f.tasks_only {
        q.push(" AND task IS NOT NULL");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_job_row_has_exactly_the_columns_of_the_row_description() {
        let job = Job::queued(Uuid::nil(), Uuid::nil(), Uuid::nil(), vec!["true".into()], crate::now());
        let row = insert_row(1, &job);
        let mut keys: Vec<&str> = row.as_object().unwrap().keys().map(String::as_str).collect();
        let mut columns: Vec<&str> = JOB_ROW.iter().map(|(column, _)| *column).collect();
        keys.sort_unstable();
        columns.sort_unstable();
        assert_eq!(keys, columns);
    }

    /// Every statement of SQLite's batch write starts from the batch and finds each job by its
    /// id: with a million jobs stored, a plan that walked the jobs table (or one of its indexes)
    /// would make every write of a job's move take seconds.
    #[tokio::test]
    async fn the_sqlite_batch_write_finds_each_job_by_its_id() {
        use sqlx::{Connection, Row};
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        crate::sqlite::migrate(&mut conn, crate::sqlite::MIGRATIONS).await.unwrap();
        let statements: Vec<&str> = SQLITE_SAVE_JOBS
            .split(";\n")
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.starts_with("BEGIN") && !s.starts_with("COMMIT"))
            .collect();
        assert_eq!(statements.len(), 7, "insert, changes, pending reasons, history, job events, other events, audit");
        for statement in statements {
            let plan: Vec<String> = sqlx::query(&format!("EXPLAIN QUERY PLAN {statement}"))
                .bind("[]")
                .fetch_all(&mut conn)
                .await
                .unwrap()
                .iter()
                .map(|row| row.get::<String, _>("detail"))
                .collect();
            let walks = plan.iter().any(|step| step.starts_with("SCAN jobs") || step.starts_with("SCAN job_history"));
            assert!(!walks, "{plan:?} walks a table for {statement}");
        }
    }
}
