//! What each attempt of a GA4GH TES task left (`task_logs`): its executors' logs, the outputs it
//! uploaded and why it failed, one JSON document per attempt, written once as the attempt ends.

use std::collections::HashMap;

use mission_api::tes::TesTaskLog;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::row::Columns;
use super::{Store, StoreError, push_any_of, with_conn};

impl Store {
    /// Keeps what attempt `attempt` of the task `job_id` left; a second report of the same
    /// attempt (an agent resending after a lost answer) replaces the first.
    pub async fn save_task_log(&self, job_id: Uuid, attempt: u32, log: &TesTaskLog) -> Result<(), StoreError> {
        let log = serde_json::to_string(log).expect("a task log serialises");
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "INSERT INTO task_logs (job_id, attempt, log) VALUES ($1, $2, $3) \
                 ON CONFLICT (job_id, attempt) DO UPDATE SET log = excluded.log",
            )
            .bind(job_id.to_string())
            .bind(i64::from(attempt))
            .bind(log)
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// The logs of the attempts of each of `job_ids` that left one, oldest attempt first.
    pub async fn task_logs(&self, job_ids: &[Uuid]) -> Result<HashMap<Uuid, Vec<TesTaskLog>>, StoreError> {
        let mut logs: HashMap<Uuid, Vec<TesTaskLog>> = HashMap::new();
        if job_ids.is_empty() {
            return Ok(logs);
        }
        let rows = with_conn!(self, reader, |conn: Db| {
            let mut q: QueryBuilder<Db> = QueryBuilder::new("SELECT job_id, log FROM task_logs WHERE 1 = 1");
            push_any_of(&mut q, "job_id", job_ids.iter().map(Uuid::to_string));
            q.push(" ORDER BY job_id, attempt");
            let mut rows = Vec::new();
            for row in q.build().fetch_all(conn).await? {
                rows.push((row.text("job_id")?, row.text("log")?));
            }
            rows
        });
        for (job_id, log) in rows {
            let job_id = Uuid::parse_str(&job_id).map_err(|e| StoreError::Corrupt(format!("task_logs.job_id: {e}")))?;
            let log = serde_json::from_str(&log).map_err(|e| StoreError::Corrupt(format!("task_logs.log: {e}")))?;
            logs.entry(job_id).or_default().push(log);
        }
        Ok(logs)
    }
}
