//! What server replicas on one PostgreSQL database share besides the data, as SQL: the lock and
//! epoch of the scheduler's leader, the mail between replicas, and notifications. The replicas'
//! protocol on top of it is `mission_server::services::cluster`.

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::{Backend, Store, StoreError, now, to_micros};

/// The advisory lock whose holder leads the scheduler.
const LEADER_LOCK: i64 = 0x6d69_7373_696f_6e01;

/// Mail older than this is swept away: its recipient is gone (a replica that stopped).
const MAIL_KEEP_MICROS: i64 = 10 * 60 * 1_000_000;

/// The cluster's view of a PostgreSQL store. Its `Debug` leaves the connect options (and so the
/// password) out.
#[derive(Clone)]
pub struct ClusterDb {
    pool: PgPool,
    options: std::sync::Arc<PgConnectOptions>,
}

/// This replica leads the scheduler for as long as this lives (its connection holds the lock; the
/// database drops the lock when the connection closes, however the process ends).
pub struct Leadership {
    connection: PgConnection,
    /// The epoch this replica leads in; its job writes are fenced with it.
    pub epoch: i64,
}

impl Store {
    /// The cluster tables of a PostgreSQL store; `None` on SQLite (one process).
    pub fn cluster(&self) -> Option<ClusterDb> {
        match &self.backend {
            Backend::Sqlite(_) => None,
            Backend::Postgres(db) => Some(ClusterDb { pool: db.pool().clone(), options: db.options().clone() }),
        }
    }
}

impl ClusterDb {
    /// Waits until this replica leads the scheduler, then starts a new epoch.
    pub async fn lead(&self, replica: Uuid) -> Result<Leadership, StoreError> {
        let mut connection = PgConnection::connect_with(&self.options).await?;
        sqlx::query("SELECT pg_advisory_lock($1)").bind(LEADER_LOCK).execute(&mut connection).await?;
        let epoch: i64 = sqlx::query_scalar(
            "UPDATE scheduler_leader SET epoch = epoch + 1, replica_id = $1, since = $2 RETURNING epoch",
        )
        .bind(replica.to_string())
        .bind(to_micros(now()))
        .fetch_one(&mut connection)
        .await?;
        Ok(Leadership { connection, epoch })
    }

    /// Sends mail: `(recipient, body)` pairs, stored in order, each recipient woken once.
    pub async fn send_mail(&self, mail: &[(String, String)]) -> Result<(), StoreError> {
        let (recipients, bodies): (Vec<String>, Vec<String>) = mail.iter().cloned().unzip();
        sqlx::query(
            "WITH sent AS (\
                INSERT INTO replica_mail (recipient, body, sent_at) \
                SELECT recipient, body, $3 FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS m (recipient, body, k) \
                ORDER BY k RETURNING recipient) \
             SELECT pg_notify($4 || recipient, '') FROM (SELECT DISTINCT recipient FROM sent) AS woken",
        )
        .bind(recipients)
        .bind(bodies)
        .bind(to_micros(now()))
        .bind(MAIL_CHANNEL)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Takes (removes and answers) the mail waiting for `recipient`, oldest first.
    pub async fn take_mail(&self, recipient: &str) -> Result<Vec<String>, StoreError> {
        let mut rows: Vec<(i64, String)> = sqlx::query_as(
            "DELETE FROM replica_mail WHERE seq IN \
             (SELECT seq FROM replica_mail WHERE recipient = $1 ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED) \
             RETURNING seq, body",
        )
        .bind(recipient)
        .fetch_all(&self.pool)
        .await?;
        rows.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(rows.into_iter().map(|(_, body)| body).collect())
    }

    /// Records that `replica` is alive now.
    pub async fn replica_seen(&self, replica: Uuid) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO replicas (replica_id, started_at, seen_at) VALUES ($1, $2, $2) \
             ON CONFLICT (replica_id) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(replica.to_string())
        .bind(to_micros(now()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Drops mail that waited too long: its recipient stopped.
    pub async fn sweep_mail(&self) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM replica_mail WHERE sent_at < $1")
            .bind(to_micros(now()) - MAIL_KEEP_MICROS)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// Sends `payload` to every replica listening on `channel`.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)").bind(channel).bind(payload).execute(&self.pool).await?;
        Ok(())
    }

    /// A listener on `channels` (on a connection of its own, reconnecting by itself).
    pub async fn listen(&self, channels: &[&str]) -> Result<PgListener, StoreError> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen_all(channels.iter().copied()).await?;
        Ok(listener)
    }
}

/// A mission file's lock in the database: an advisory lock scoped to a transaction that lives as
/// long as this (dropping it rolls the transaction back, which releases the lock).
#[derive(Debug)]
pub struct PathLock {
    _transaction: Transaction<'static, Postgres>,
}

impl ClusterDb {
    /// Waits for and takes the lock of `path` in `mission_id`, shared by every replica.
    pub async fn lock_path(&self, mission_id: Uuid, path: &str) -> Result<PathLock, StoreError> {
        let digest = ring::digest::digest(&ring::digest::SHA256, format!("{mission_id}/{path}").as_bytes());
        let key = i64::from_be_bytes(digest.as_ref()[..8].try_into().expect("8 bytes"));
        let mut transaction = self.pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(key).execute(&mut *transaction).await?;
        Ok(PathLock { _transaction: transaction })
    }
}

/// The channel that wakes `recipient` for its mail is this prefix and the recipient.
pub const MAIL_CHANNEL: &str = "mission_mail_";

impl Leadership {
    /// Checks that the lock's connection is alive, so the lead is still this replica's.
    pub async fn check(&mut self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&mut self.connection).await?;
        Ok(())
    }
}

impl std::fmt::Debug for ClusterDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterDb").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership").field("epoch", &self.epoch).finish_non_exhaustive()
    }
}

/// Jobs' output kept in a shared database, chunk by chunk as agents send it.
impl ClusterDb {
    /// The size of a job's stream, and where its output received so far ends when it passed
    /// its cap (and is not sealed yet): see `mission_server::job_logs`.
    pub async fn log_state(&self, job_id: Uuid, stream: &str) -> Result<(u64, Option<u64>), StoreError> {
        let row: (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT (SELECT MAX(start + length(data)) FROM job_log_chunks WHERE job_id = $1 AND stream = $2), \
             (SELECT MAX(start + length(data)) FROM job_log_tails WHERE job_id = $1 AND stream = $2)",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .fetch_one(&self.pool)
        .await?;
        Ok((row.0.unwrap_or(0) as u64, row.1.map(|end| end as u64)))
    }

    /// The size, SHA-256 (hex) and last write of a job's stream, if anything was written: hashed
    /// in the database, so listing a job's results does not carry its logs here.
    pub async fn log_summary(&self, job_id: Uuid, stream: &str) -> Result<Option<(u64, String, i64)>, StoreError> {
        let row: (Option<i64>, Option<String>, Option<i64>) = sqlx::query_as(
            "SELECT MAX(start + length(data)), encode(sha256(string_agg(data, ''::bytea ORDER BY start)), 'hex'), \
             MAX(written_at) FROM job_log_chunks WHERE job_id = $1 AND stream = $2",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .fetch_one(&self.pool)
        .await?;
        Ok(match row {
            (Some(size), Some(sha256), Some(at)) => Some((size as u64, sha256, at)),
            _ => None,
        })
    }

    /// Adds `data` at `start` of a job's stream (where it ends now; a concurrent writer of the
    /// same place makes this a [`StoreError::Conflict`]).
    pub async fn append_log(&self, job_id: Uuid, stream: &str, start: u64, data: &[u8]) -> Result<(), StoreError> {
        let result = sqlx::query(
            "INSERT INTO job_log_chunks (job_id, stream, start, data, written_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .bind(start as i64)
        .bind(data)
        .bind(to_micros(now()))
        .execute(&self.pool)
        .await;
        super::conflict_on_duplicate(result, || "another write of this log came first; send it again".into())
    }

    /// Adds `data` at `start` of the output past a stream's cap, and drops the oldest chunks
    /// that end before its last `keep` bytes.
    pub async fn append_log_tail(
        &self,
        job_id: Uuid,
        stream: &str,
        start: u64,
        data: &[u8],
        keep: u64,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let result = sqlx::query("INSERT INTO job_log_tails (job_id, stream, start, data) VALUES ($1, $2, $3, $4)")
            .bind(job_id.to_string())
            .bind(stream)
            .bind(start as i64)
            .bind(data)
            .execute(&mut *tx)
            .await;
        super::conflict_on_duplicate(result, || "another write of this log came first; send it again".into())?;
        sqlx::query("DELETE FROM job_log_tails WHERE job_id = $1 AND stream = $2 AND start + length(data) <= $3")
            .bind(job_id.to_string())
            .bind(stream)
            .bind((start + data.len() as u64).saturating_sub(keep) as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Moves a stream's tail into its log as one chunk, `sealed(head size, tail bytes)`, in one
    /// transaction; nothing when it has no tail (never passed its cap, or sealed already).
    pub async fn seal_log(
        &self,
        job_id: Uuid,
        stream: &str,
        sealed: impl FnOnce(u64, Vec<u8>) -> Vec<u8>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let chunks: Vec<Vec<u8>> = sqlx::query_scalar(
            "SELECT data FROM job_log_tails WHERE job_id = $1 AND stream = $2 ORDER BY start FOR UPDATE",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .fetch_all(&mut *tx)
        .await?;
        if chunks.is_empty() {
            return Ok(());
        }
        let head: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(start + length(data)) FROM job_log_chunks WHERE job_id = $1 AND stream = $2",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .fetch_one(&mut *tx)
        .await?;
        let head = head.unwrap_or(0) as u64;
        sqlx::query("INSERT INTO job_log_chunks (job_id, stream, start, data, written_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(job_id.to_string())
            .bind(stream)
            .bind(head as i64)
            .bind(sealed(head, chunks.concat()))
            .bind(to_micros(now()))
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM job_log_tails WHERE job_id = $1 AND stream = $2")
            .bind(job_id.to_string())
            .bind(stream)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The bytes of a job's stream from `from` to its end, and its size when it passed its cap
    /// and is not sealed yet (then the marker follows; see `mission_server::job_logs`). One statement,
    /// so one snapshot: the log and its tail as one seal left them.
    pub async fn read_log(&self, job_id: Uuid, stream: &str, from: u64) -> Result<(Vec<u8>, Option<u64>), StoreError> {
        let rows: Vec<(i64, Vec<u8>, bool)> = sqlx::query_as(
            "SELECT start, data, FALSE FROM job_log_chunks WHERE job_id = $1 AND stream = $2 \
             AND start + length(data) > $3 \
             UNION ALL SELECT (SELECT COALESCE(MAX(start + length(data)), 0) FROM job_log_chunks \
                 WHERE job_id = $1 AND stream = $2), ''::bytea, TRUE \
             WHERE EXISTS (SELECT 1 FROM job_log_tails WHERE job_id = $1 AND stream = $2) \
             ORDER BY 3, 1",
        )
        .bind(job_id.to_string())
        .bind(stream)
        .bind(from as i64)
        .fetch_all(&self.pool)
        .await?;
        let mut bytes = Vec::new();
        let mut unsealed = None;
        for (start, data, past_cap) in rows {
            if past_cap {
                unsealed = Some(start as u64);
                continue;
            }
            let skip = (from.saturating_sub(start as u64) as usize).min(data.len());
            bytes.extend_from_slice(&data[skip..]);
        }
        Ok((bytes, unsealed))
    }
}

/// The sign-in brakes replicas share (the rules are `mission_server::idp::throttle`'s).
impl ClusterDb {
    /// How long until none of `keys` is made to wait, if any is.
    pub async fn brake_wait(&self, keys: &[String]) -> Result<Option<std::time::Duration>, StoreError> {
        let until: Option<i64> = sqlx::query_scalar("SELECT MAX(until) FROM sign_in_brakes WHERE key = ANY($1)")
            .bind(keys)
            .fetch_one(&self.pool)
            .await?;
        let left = until.unwrap_or(0) - to_micros(now());
        Ok((left > 0).then(|| std::time::Duration::from_micros(left as u64)))
    }

    /// Counts a failure against `key`; answers how many it has now. `wait` says, from that
    /// count, how long the key must then wait.
    pub async fn brake_failed(
        &self,
        key: &str,
        wait: impl FnOnce(u64) -> Option<std::time::Duration>,
    ) -> Result<(), StoreError> {
        let at = to_micros(now());
        let count: i64 = sqlx::query_scalar(
            "INSERT INTO sign_in_brakes (key, count, window_start, until) VALUES ($1, 1, $2, 0) \
             ON CONFLICT (key) DO UPDATE SET count = sign_in_brakes.count + 1, window_start = $2 RETURNING count",
        )
        .bind(key)
        .bind(at)
        .fetch_one(&self.pool)
        .await?;
        if let Some(wait) = wait(count as u64) {
            sqlx::query("UPDATE sign_in_brakes SET until = $2 WHERE key = $1")
                .bind(key)
                .bind(at + i64::try_from(wait.as_micros()).unwrap_or(i64::MAX / 2))
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }

    /// Clears `key`.
    pub async fn brake_clear(&self, key: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sign_in_brakes WHERE key = $1").bind(key).execute(&self.pool).await?;
        Ok(())
    }

    /// Counts an event for `key` in windows of `window`; `Err(how long until the next is
    /// allowed)` once more than `max` fell in the current one.
    pub async fn brake_rate(
        &self,
        key: &str,
        max: u32,
        window: std::time::Duration,
    ) -> Result<Result<(), std::time::Duration>, StoreError> {
        let at = to_micros(now());
        let window = i64::try_from(window.as_micros()).unwrap_or(i64::MAX / 2);
        let (count, start): (i64, i64) = sqlx::query_as(
            "INSERT INTO sign_in_brakes (key, count, window_start, until) VALUES ($1, 1, $2, 0) \
             ON CONFLICT (key) DO UPDATE SET \
               count = CASE WHEN sign_in_brakes.window_start <= $2 - $3 THEN 1 ELSE sign_in_brakes.count + 1 END, \
               window_start = CASE WHEN sign_in_brakes.window_start <= $2 - $3 THEN $2 \
                              ELSE sign_in_brakes.window_start END \
             RETURNING count, window_start",
        )
        .bind(key)
        .bind(at)
        .bind(window)
        .fetch_one(&self.pool)
        .await?;
        if count > i64::from(max) {
            return Ok(Err(std::time::Duration::from_micros((start + window - at).max(0) as u64)));
        }
        Ok(Ok(()))
    }

    /// Drops brakes that hold nothing back any more (a day after their last event).
    pub async fn sweep_brakes(&self) -> Result<u64, StoreError> {
        let day_ago = to_micros(now()) - 24 * 3600 * 1_000_000;
        let done = sqlx::query("DELETE FROM sign_in_brakes WHERE window_start < $1 AND until < $1")
            .bind(day_ago)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
