//! Jobs, their history and results, and the landing-zone rows the scheduler keeps current.

use std::collections::HashMap;

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
        // One fixed script fed the batch as JSON: one trip to SQLite's worker thread (those
        // thread hand-offs were most of what the scheduler waited for), and statements that are
        // prepared once, whatever the batch's size and shape (parsing SQL built per batch was an
        // eighth of the server's CPU under load).
        let batch = JobBatch::new(inserts, updates);
        let mut conn = self.writer().await;
        let written =
            sqlx::query(SAVE_JOBS).bind(batch.jobs).bind(batch.changes).bind(batch.history).execute(&mut *conn).await;
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

    /// The mission of a job placed on `lz_id`, and the mission's destination cargo bay: one
    /// read, for the end of every job.
    pub async fn placed_job_destination(
        &self,
        job_id: Uuid,
        lz_id: Uuid,
    ) -> Result<Option<(Uuid, Option<Uuid>)>, StoreError> {
        let row = sqlx::query(
            "SELECT j.mission_id, m.destination_storage_id FROM jobs j JOIN missions m USING (mission_id) \
             WHERE j.job_id = ? AND j.lz_id = ?",
        )
        .bind(job_id.to_string())
        .bind(lz_id.to_string())
        .fetch_optional(&mut *self.reader().await)
        .await?;
        row.map(|r| {
            let destination: Option<String> = r.try_get(1)?;
            Ok((parse_uuid(&r.try_get::<String, _>(0)?)?, destination.as_deref().map(parse_uuid).transpose()?))
        })
        .transpose()
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

/// What [`Store::save_jobs`] runs, with three JSON arrays for its parameters: new job rows (in
/// submission order), the changes to job rows (one per job, the batch's moves of it folded
/// together), and the history rows to append. A history row's `n` is given where the batch knows
/// it (new jobs); otherwise it follows the job's rows already stored, `k` being its place among
/// the batch's rows of that job. (SQLite reads a table an `INSERT … SELECT` writes into before it
/// writes, so the count is that of the rows stored before the statement.)
const SAVE_JOBS: &str = "BEGIN IMMEDIATE;
INSERT INTO jobs (seq, job_id, mission_id, user_id, station_id, requested_lz_id, lz_id, status, cpu_count, \
    memory_amount, gpu_count, gpu_indices, command, exit_code, reason, limits, created_at, started_at, finished_at) \
SELECT last.seq + j.key + 1, j.value ->> 'job_id', j.value ->> 'mission_id', j.value ->> 'user_id', \
    j.value ->> 'station_id', j.value ->> 'requested_lz_id', j.value ->> 'lz_id', j.value ->> 'status', \
    j.value ->> 'cpu_count', j.value ->> 'memory_amount', j.value ->> 'gpu_count', j.value ->> 'gpu_indices', \
    j.value ->> 'command', j.value ->> 'exit_code', j.value ->> 'reason', j.value ->> 'limits', \
    j.value ->> 'created_at', j.value ->> 'started_at', j.value ->> 'finished_at' \
FROM json_each(?) AS j, (SELECT COALESCE(MAX(seq), 0) AS seq FROM jobs) AS last;
UPDATE jobs SET status = c.value ->> 'status', \
    lz_id = IIF(json_type(c.value, '$.lz_id') IS NULL, jobs.lz_id, c.value ->> 'lz_id'), \
    gpu_indices = COALESCE(c.value ->> 'gpu_indices', jobs.gpu_indices), \
    exit_code = COALESCE(c.value ->> 'exit_code', jobs.exit_code), \
    reason = COALESCE(c.value ->> 'reason', jobs.reason), \
    limits = COALESCE(c.value ->> 'limits', jobs.limits), \
    started_at = IIF(json_type(c.value, '$.started_at') IS NULL, jobs.started_at, c.value ->> 'started_at'), \
    finished_at = COALESCE(c.value ->> 'finished_at', jobs.finished_at) \
FROM json_each(?) AS c WHERE jobs.job_id = c.value ->> 'job_id';
INSERT INTO job_history (job_id, n, status, at, detail) \
SELECT h.value ->> 'job_id', \
    COALESCE(h.value ->> 'n', (SELECT COUNT(*) FROM job_history WHERE job_id = h.value ->> 'job_id') + (h.value ->> 'k')), \
    h.value ->> 'status', h.value ->> 'at', h.value ->> 'detail' \
FROM json_each(?) AS h;
COMMIT;";

/// A batch of [`Store::save_jobs`] as the JSON parameters of [`SAVE_JOBS`].
struct JobBatch {
    jobs: String,
    changes: String,
    history: String,
}

/// A job row's change: fields left out keep their value (`Some(None)` writes NULL).
#[derive(serde::Serialize)]
struct JobChange {
    job_id: String,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lz_id: Option<Option<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gpu_indices: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_at: Option<Option<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<i64>,
}

impl JobBatch {
    fn new(inserts: &[Job], updates: &[JobUpdate]) -> Self {
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
        for job in inserts {
            jobs.push(serde_json::json!({
                "job_id": job.job_id.to_string(),
                "mission_id": job.mission_id.to_string(),
                "user_id": job.user_id.to_string(),
                "station_id": job.station_id.to_string(),
                "requested_lz_id": job.requested_lz_id.map(|id| id.to_string()),
                "lz_id": job.lz_id.map(|id| id.to_string()),
                "status": job.status.as_str(),
                "cpu_count": job.cpu_count,
                "memory_amount": job.memory_amount,
                "gpu_count": job.gpu_count,
                "gpu_indices": join_indices(&job.gpu_indices),
                "command": serde_json::to_string(&job.command).expect("strings serialise"),
                "exit_code": job.exit_code,
                "reason": job.reason,
                "limits": job.limits,
                "created_at": to_micros(job.created_at),
                "started_at": job.started_at.map(to_micros),
                "finished_at": job.finished_at.map(to_micros),
            }));
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
                    lz_id: None,
                    gpu_indices: None,
                    exit_code: None,
                    reason: None,
                    limits: None,
                    started_at: None,
                    finished_at: None,
                });
                changes.len() - 1
            });
            let change = &mut changes[i];
            let at = to_micros(u.at);
            change.status = u.status.as_str();
            if let Some(lz) = u.lz_id {
                change.lz_id = Some(lz.map(|id| id.to_string()));
            }
            if let Some(gpus) = &u.gpu_indices {
                change.gpu_indices = Some(join_indices(gpus));
            }
            change.exit_code = u.exit_code.or(change.exit_code);
            change.reason = u.reason.clone().or(change.reason.take());
            change.limits = u.limits.clone().or(change.limits.take());
            match u.status {
                JobStatus::Running => change.started_at = Some(Some(at)),
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
        Self {
            jobs: serde_json::to_string(&jobs).expect("JSON values serialise"),
            changes: serde_json::to_string(&changes).expect("job changes serialise"),
            history: serde_json::to_string(&history).expect("JSON values serialise"),
        }
    }
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

#[cfg(test)]
mod tests {
    use mission_api::{JobStatus, LandingZone, Mission};

    use super::*;
    use crate::store::{UserRecord, now};

    /// The `local` station every store starts with.
    const LOCAL_STATION: &str = "6d697373-696f-4e00-8000-000000000002";

    async fn store_with_mission(dir: &std::path::Path) -> (Store, Job, Uuid) {
        let store = Store::open(&format!("sqlite://{}", dir.join("db.sqlite").display())).await.unwrap();
        let user = UserRecord {
            user_id: Uuid::new_v4(),
            username: "ada".into(),
            password_hash: None,
            external_sub: None,
            admin: false,
            created_at: now(),
        };
        store.insert_user(&user).await.unwrap();
        let mission = Mission {
            mission_id: Uuid::new_v4(),
            name: "m".into(),
            description: String::new(),
            mission_type_id: None,
            source_storage_id: None,
            destination_storage_id: None,
            source_path: None,
            destination_path: None,
            settings: Default::default(),
            public: false,
            archived: false,
            args: Vec::new(),
            user_id: user.user_id,
            created_at: now(),
            updated_at: now(),
        };
        store.insert_mission(&mission).await.unwrap();
        let station_id = Uuid::parse_str(LOCAL_STATION).unwrap();
        let lz = LandingZone {
            lz_id: Uuid::new_v4(),
            station_id,
            name: "lz".into(),
            online: false,
            resources: None,
            last_seen_at: None,
            created_at: now(),
        };
        store.insert_landing_zone(&lz, "hash").await.unwrap();
        let job = Job {
            job_id: Uuid::new_v4(),
            mission_id: mission.mission_id,
            user_id: user.user_id,
            station_id,
            requested_lz_id: None,
            lz_id: None,
            status: JobStatus::Queued,
            cpu_count: 1,
            memory_amount: 256,
            gpu_count: 0,
            gpu_indices: Vec::new(),
            command: vec!["sh".into(), "run.sh".into()],
            exit_code: None,
            reason: None,
            limits: None,
            history: vec![JobTransition { status: JobStatus::Queued, at: now(), detail: None }],
            created_at: now(),
            started_at: None,
            finished_at: None,
        };
        (store, job, lz.lz_id)
    }

    fn moved(job_id: Uuid, status: JobStatus) -> JobUpdate {
        JobUpdate::new(job_id, status)
    }

    #[tokio::test]
    async fn a_batch_folds_several_moves_of_a_job_and_numbers_their_history() {
        let dir = tempfile::tempdir().unwrap();
        let (store, first, lz) = store_with_mission(dir.path()).await;
        let second = Job { job_id: Uuid::new_v4(), ..first.clone() };

        // A job submitted and placed in one batch, beside one only submitted.
        let assigned = JobUpdate {
            lz_id: Some(Some(lz)),
            gpu_indices: Some(vec![0, 1]),
            detail: Some("on lz".into()),
            ..moved(first.job_id, JobStatus::Assigned)
        };
        store.save_jobs(&[first.clone(), second.clone()], &[assigned]).await.unwrap();
        let stored = store.job(first.job_id).await.unwrap().unwrap();
        assert_eq!(
            (stored.status, stored.lz_id, stored.gpu_indices.clone()),
            (JobStatus::Assigned, Some(lz), vec![0, 1])
        );
        assert_eq!(stored.history.len(), 2);
        assert_eq!(stored.history[1].detail.as_deref(), Some("on lz"));
        let stored_second = store.job(second.job_id).await.unwrap().unwrap();
        assert_eq!(stored_second.command, first.command);
        let (listed, total) = store.jobs(&JobFilter { items: 10, page: 1, ..Default::default() }).await.unwrap();
        assert_eq!(total, 2);
        assert_eq!(listed[0].job_id, second.job_id, "newest first: submission order is kept");

        // Several moves of a stored job in one batch: the row ends in the last state, every
        // move is in the history, in order.
        let limits = JobUpdate { limits: Some("enforced".into()), ..moved(first.job_id, JobStatus::Running) };
        let done = JobUpdate { exit_code: Some(0), ..moved(first.job_id, JobStatus::Completed) };
        let staging = moved(first.job_id, JobStatus::Staging);
        store.save_jobs(&[], &[staging, limits, done.clone()]).await.unwrap();
        let stored = store.job(first.job_id).await.unwrap().unwrap();
        let statuses: Vec<_> = stored.history.iter().map(|t| t.status).collect();
        assert_eq!(
            statuses,
            [JobStatus::Queued, JobStatus::Assigned, JobStatus::Staging, JobStatus::Running, JobStatus::Completed]
        );
        assert_eq!(stored.status, JobStatus::Completed);
        assert_eq!((stored.exit_code, stored.limits.as_deref()), (Some(0), Some("enforced")));
        assert_eq!(stored.lz_id, Some(lz), "fields a move leaves out keep their value");
        assert!(stored.started_at.is_some());
        assert_eq!(stored.finished_at, Some(done.at));

        // A re-queue clears the placement and the start.
        let placed = JobUpdate { lz_id: Some(Some(lz)), ..moved(second.job_id, JobStatus::Assigned) };
        let running = moved(second.job_id, JobStatus::Running);
        let requeued = JobUpdate { lz_id: Some(None), ..moved(second.job_id, JobStatus::Queued) };
        store.save_jobs(&[], &[placed, running, requeued]).await.unwrap();
        let stored = store.job(second.job_id).await.unwrap().unwrap();
        assert_eq!((stored.status, stored.lz_id, stored.started_at), (JobStatus::Queued, None, None));
        assert_eq!(stored.history.len(), 4);
    }

    #[tokio::test]
    async fn a_failing_batch_leaves_nothing_written() {
        let dir = tempfile::tempdir().unwrap();
        let (store, job, _) = store_with_mission(dir.path()).await;
        // The second insert repeats the first's id: the whole batch is refused.
        let err = store.save_jobs(&[job.clone(), job.clone()], &[]).await;
        assert!(err.is_err());
        assert!(store.job(job.job_id).await.unwrap().is_none());
        // And the writer is usable afterwards.
        store.save_jobs(std::slice::from_ref(&job), &[moved(job.job_id, JobStatus::Stopped)]).await.unwrap();
        assert_eq!(store.job(job.job_id).await.unwrap().unwrap().status, JobStatus::Stopped);
    }
}
