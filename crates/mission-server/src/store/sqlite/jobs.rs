//! Jobs, their history and results, and the landing-zone rows the scheduler keeps current.

use chrono::{DateTime, Utc};
use mission_api::{Job, JobStatus, JobTransition, Resources};
use sqlx::sqlite::SqliteRow;
use sqlx::{QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use super::{Store, parse_uuid};
use crate::store::{FileRecord, JobFilter, JobUpdate, LzIdentity, StoreError, from_micros, to_micros};

const JOB_COLUMNS: &str = "job_id, mission_id, user_id, station_id, requested_lz_id, lz_id, status, cpu_count, \
    memory_amount, gpu_count, gpu_indices, command, exit_code, reason, limits, created_at, started_at, finished_at";

impl Store {
    /// Writes new jobs (each with its history so far) and then job moves, in order, in one
    /// transaction: a move updates the row and appends its history entry. Entering `running`
    /// sets `started_at`; a final status sets `finished_at`.
    pub async fn save_jobs(&self, inserts: &[Job], updates: &[JobUpdate]) -> Result<(), StoreError> {
        if inserts.is_empty() && updates.is_empty() {
            return Ok(());
        }
        // One script, so the batch costs one trip to SQLite's worker thread rather than two per
        // row: those thread hand-offs, not SQLite, were most of the time the scheduler waited.
        let mut script = QueryBuilder::<Sqlite>::new("BEGIN IMMEDIATE;");
        for job in inserts {
            push_insert_job(&mut script, job);
        }
        for u in updates {
            push_update_job(&mut script, u);
        }
        script.push("COMMIT;");
        let mut conn = self.writer().await;
        // Small batches (a job's moves, a hand-over) come in few shapes: their prepared
        // statements are kept, as sqlx does for a single query. Large ones (a burst of
        // submissions) are prepared afresh, so the statement cache never holds hundreds of them.
        let small = inserts.len() + updates.len() <= 4;
        let written = script.build().persistent(small).execute(&mut *conn).await;
        if written.is_err() {
            // The script stopped at the failing statement, inside its transaction.
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        }
        written?;
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
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?"))
            .bind(job_id.to_string())
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// A job's transitions, oldest first.
    pub async fn job_history(&self, job_id: Uuid) -> Result<Vec<JobTransition>, StoreError> {
        let rows = sqlx::query("SELECT status, at, detail FROM job_history WHERE job_id = ? ORDER BY n")
            .bind(job_id.to_string())
            .fetch_all(&mut *self.reader().await)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(JobTransition {
                    status: parse_status(&r.try_get::<String, _>(0)?)?,
                    at: from_micros(r.try_get(1)?)?,
                    detail: r.try_get(2)?,
                })
            })
            .collect()
    }

    /// A page of jobs matching `filter`, newest first, with the total count; listings leave
    /// `history` empty (one job's `GET` has it).
    pub async fn jobs(&self, filter: &JobFilter) -> Result<(Vec<Job>, u64), StoreError> {
        fn conditions<'a>(q: &mut QueryBuilder<'a, Sqlite>, f: &'a JobFilter) {
            q.push(" WHERE 1 = 1");
            if let Some(user) = f.user {
                q.push(" AND user_id = ").push_bind(user.to_string());
            }
            let mut any_of = |column: &str, values: Vec<String>| {
                if !values.is_empty() {
                    q.push(format!(" AND {column} IN ("));
                    let mut list = q.separated(", ");
                    for v in values {
                        list.push_bind(v);
                    }
                    list.push_unseparated(")");
                }
            };
            any_of("mission_id", f.mission_ids.iter().map(Uuid::to_string).collect());
            any_of("station_id", f.station_ids.iter().map(Uuid::to_string).collect());
            any_of("status", f.statuses.iter().map(|s| s.as_str().to_owned()).collect());
        }
        let mut count = QueryBuilder::new("SELECT COUNT(*) FROM jobs");
        conditions(&mut count, filter);
        let total: i64 = count.build_query_scalar().fetch_one(&mut *self.reader().await).await?;
        let mut q = QueryBuilder::new(format!("SELECT {JOB_COLUMNS} FROM jobs"));
        conditions(&mut q, filter);
        q.push(" ORDER BY seq DESC LIMIT ")
            .push_bind(i64::from(filter.items))
            .push(" OFFSET ")
            .push_bind(i64::from(filter.page.saturating_sub(1)) * i64::from(filter.items));
        let rows = q.build().fetch_all(&mut *self.reader().await).await?;
        let jobs = rows.iter().map(job_from_row).collect::<Result<_, _>>()?;
        Ok((jobs, total as u64))
    }

    /// Every job that has not ended, in submission order (what the scheduler rebuilds from).
    pub async fn unfinished_jobs(&self) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE status NOT IN ('completed', 'failed', 'stopped', 'lost') \
             ORDER BY seq"
        ))
        .fetch_all(&mut *self.reader().await)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// How many jobs of a mission have not ended.
    pub async fn mission_unfinished_jobs(&self, mission_id: Uuid) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE mission_id = ? AND status NOT IN ('completed', 'failed', 'stopped', 'lost')",
        )
        .bind(mission_id.to_string())
        .fetch_one(&mut *self.reader().await)
        .await?;
        Ok(n as u64)
    }

    /// Records (or replaces) a result file of a job; `record.mission_id` is ignored.
    pub async fn insert_job_result(&self, job_id: Uuid, record: &FileRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO job_results (job_id, path, size, sha256, e_tag, modified_at) VALUES (?, ?, ?, ?, ?, ?) \
             ON CONFLICT (job_id, path) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, \
             e_tag = excluded.e_tag, modified_at = excluded.modified_at",
        )
        .bind(job_id.to_string())
        .bind(&record.path)
        .bind(record.size as i64)
        .bind(&record.sha256)
        .bind(&record.e_tag)
        .bind(to_micros(record.modified_at))
        .execute(&mut *self.writer().await)
        .await?;
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
        let rows = sqlx::query(
            "SELECT path, size, sha256, e_tag, modified_at FROM job_results WHERE job_id = ?1 \
             AND (?2 IS NULL OR path = ?2) ORDER BY path",
        )
        .bind(job.job_id.to_string())
        .bind(path)
        .fetch_all(&mut *self.reader().await)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(FileRecord {
                    mission_id: job.mission_id,
                    path: r.try_get(0)?,
                    user_id: job.user_id,
                    size: r.try_get::<i64, _>(1)? as u64,
                    sha256: r.try_get(2)?,
                    e_tag: r.try_get(3)?,
                    modified_at: from_micros(r.try_get(4)?)?,
                })
            })
            .collect()
    }

    /// The landing zone whose agent token hashes to `token_hash`.
    pub async fn lz_by_token_hash(&self, token_hash: &str) -> Result<Option<LzIdentity>, StoreError> {
        let row = sqlx::query("SELECT lz_id, station_id, name FROM landing_zones WHERE token_hash = ?")
            .bind(token_hash)
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.map(|r| {
            Ok(LzIdentity {
                lz_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
                station_id: parse_uuid(&r.try_get::<String, _>(1)?)?,
                name: r.try_get(2)?,
            })
        })
        .transpose()
    }

    /// Records what an agent advertised on connecting, and that it was seen `now`.
    pub async fn lz_connected(&self, lz_id: Uuid, resources: Resources, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE landing_zones SET cpu_count = ?, memory_amount = ?, gpu_count = ?, last_seen_at = ? \
             WHERE lz_id = ?",
        )
        .bind(i64::from(resources.cpu_count))
        .bind(resources.memory_amount as i64)
        .bind(i64::from(resources.gpu_count))
        .bind(to_micros(now))
        .bind(lz_id.to_string())
        .execute(&mut *self.writer().await)
        .await?;
        Ok(())
    }

    /// Records that an agent was heard from `now`.
    pub async fn lz_seen(&self, lz_id: Uuid, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("UPDATE landing_zones SET last_seen_at = ? WHERE lz_id = ?")
            .bind(to_micros(now))
            .bind(lz_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
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
        let id: String = sqlx::query_scalar(
            "INSERT INTO landing_zones (lz_id, station_id, name, token_hash, created_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (station_id, name) DO UPDATE SET token_hash = excluded.token_hash RETURNING lz_id",
        )
        .bind(Uuid::new_v4().to_string())
        .bind(station_id.to_string())
        .bind(name)
        .bind(token_hash)
        .bind(to_micros(now))
        .fetch_one(&mut *self.writer().await)
        .await?;
        parse_uuid(&id)
    }
}

/// Appends the statements adding a job row with its history so far.
fn push_insert_job(script: &mut QueryBuilder<'_, Sqlite>, job: &Job) {
    script
        .push(format!("INSERT INTO jobs (seq, {JOB_COLUMNS}) VALUES ((SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), "));
    let mut values = script.separated(", ");
    values
        .push_bind(job.job_id.to_string())
        .push_bind(job.mission_id.to_string())
        .push_bind(job.user_id.to_string())
        .push_bind(job.station_id.to_string())
        .push_bind(job.requested_lz_id.map(|id| id.to_string()))
        .push_bind(job.lz_id.map(|id| id.to_string()))
        .push_bind(job.status.as_str())
        .push_bind(i64::from(job.cpu_count))
        .push_bind(job.memory_amount as i64)
        .push_bind(i64::from(job.gpu_count))
        .push_bind(join_indices(&job.gpu_indices))
        .push_bind(serde_json::to_string(&job.command).expect("strings serialise"))
        .push_bind(job.exit_code)
        .push_bind(job.reason.clone())
        .push_bind(job.limits.clone())
        .push_bind(to_micros(job.created_at))
        .push_bind(job.started_at.map(to_micros))
        .push_bind(job.finished_at.map(to_micros));
    script.push(");");
    for (n, t) in job.history.iter().enumerate() {
        push_insert_history(script, job.job_id, Some(n as i64), t);
    }
}

/// Appends the statements of one move: the row, then its history entry.
fn push_update_job(script: &mut QueryBuilder<'_, Sqlite>, u: &JobUpdate) {
    let at = to_micros(u.at);
    script.push("UPDATE jobs SET status = ").push_bind(u.status.as_str());
    if let Some(lz) = u.lz_id {
        script.push(", lz_id = ").push_bind(lz.map(|id| id.to_string()));
    }
    if let Some(gpus) = &u.gpu_indices {
        script.push(", gpu_indices = ").push_bind(join_indices(gpus));
    }
    if let Some(code) = u.exit_code {
        script.push(", exit_code = ").push_bind(code);
    }
    if let Some(reason) = &u.reason {
        script.push(", reason = ").push_bind(reason.clone());
    }
    if let Some(limits) = &u.limits {
        script.push(", limits = ").push_bind(limits.clone());
    }
    if u.status == JobStatus::Running {
        script.push(", started_at = ").push_bind(at);
    }
    if u.status == JobStatus::Queued {
        script.push(", started_at = NULL");
    }
    if u.status.is_final() {
        script.push(", finished_at = ").push_bind(at);
    }
    script.push(" WHERE job_id = ").push_bind(u.job_id.to_string()).push(";");
    let transition = JobTransition { status: u.status, at: u.at, detail: u.detail.clone() };
    push_insert_history(script, u.job_id, None, &transition);
}

/// Appends a history row numbered `n`, or after the job's last row when `None`. (Parameters in
/// a script must be anonymous `?`: SQLite numbers `?N` per statement, sqlx binds across them.)
fn push_insert_history(script: &mut QueryBuilder<'_, Sqlite>, job_id: Uuid, n: Option<i64>, t: &JobTransition) {
    script
        .push("INSERT INTO job_history (job_id, n, status, at, detail) VALUES (")
        .push_bind(job_id.to_string())
        .push(", COALESCE(")
        .push_bind(n)
        .push(", (SELECT COUNT(*) FROM job_history WHERE job_id = ")
        .push_bind(job_id.to_string())
        .push(")), ")
        .push_bind(t.status.as_str())
        .push(", ")
        .push_bind(to_micros(t.at))
        .push(", ")
        .push_bind(t.detail.clone())
        .push(");");
}

fn join_indices(indices: &[u32]) -> String {
    indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

fn parse_status(s: &str) -> Result<JobStatus, StoreError> {
    s.parse().map_err(StoreError::Corrupt)
}

fn job_from_row(r: &SqliteRow) -> Result<Job, StoreError> {
    let opt_uuid = |i: usize| -> Result<Option<Uuid>, StoreError> {
        r.try_get::<Option<String>, _>(i)?.as_deref().map(parse_uuid).transpose()
    };
    let indices: String = r.try_get(10)?;
    let gpu_indices = indices
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| StoreError::Corrupt(format!("gpu index {s:?}"))))
        .collect::<Result<_, _>>()?;
    let command: String = r.try_get(11)?;
    Ok(Job {
        job_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
        mission_id: parse_uuid(&r.try_get::<String, _>(1)?)?,
        user_id: parse_uuid(&r.try_get::<String, _>(2)?)?,
        station_id: parse_uuid(&r.try_get::<String, _>(3)?)?,
        requested_lz_id: opt_uuid(4)?,
        lz_id: opt_uuid(5)?,
        status: parse_status(&r.try_get::<String, _>(6)?)?,
        cpu_count: r.try_get::<i64, _>(7)? as u32,
        memory_amount: r.try_get::<i64, _>(8)? as u64,
        gpu_count: r.try_get::<i64, _>(9)? as u32,
        gpu_indices,
        command: serde_json::from_str(&command).map_err(|e| StoreError::Corrupt(format!("job command: {e}")))?,
        exit_code: r.try_get(12)?,
        reason: r.try_get(13)?,
        limits: r.try_get(14)?,
        history: Vec::new(),
        created_at: from_micros(r.try_get(15)?)?,
        started_at: r.try_get::<Option<i64>, _>(16)?.map(from_micros).transpose()?,
        finished_at: r.try_get::<Option<i64>, _>(17)?.map(from_micros).transpose()?,
    })
}
