//! Mission files, the intents that make their changes crash-safe, and the usage the file limits
//! are checked against.

use sqlx::Connection;
use uuid::Uuid;

use super::audit::sqlite_append_audit;
use super::events::{NewEvent, commit_with_events, events_json, sqlite_append_events};
use super::row::Columns;
use super::{FileRecord, Intent, IntentKind, Store, StoreError, UploadUsage, to_micros, with_conn};

/// Columns of `mission_files`, as [`file_from_row`] reads them.
const FILE_COLUMNS: &str = "mission_id, path, user_id, size, sha256, e_tag, modified_at";

/// The upsert of a committed file; its intent's id is parameter 8.
macro_rules! upsert_file {
    () => {
        "INSERT INTO mission_files (mission_id, path, user_id, size, sha256, e_tag, modified_at) \
    VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (mission_id, path) DO UPDATE SET \
    user_id = excluded.user_id, size = excluded.size, sha256 = excluded.sha256, \
    e_tag = excluded.e_tag, modified_at = excluded.modified_at"
    };
}

impl Store {
    /// Records that a change of a mission file is about to touch its object.
    pub async fn begin_intent(&self, intent: &Intent) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query(
                "INSERT INTO file_intents (intent_id, kind, mission_id, path, created_at, replica_id) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(intent.intent_id.to_string())
            .bind(match intent.kind {
                IntentKind::Upload => "upload",
                IntentKind::Delete => "delete",
            })
            .bind(intent.mission_id.to_string())
            .bind(&intent.path)
            .bind(to_micros(super::now()))
            .bind(self.replica.map(|r| r.to_string()))
            .execute(conn)
            .await?;
        });
        Ok(())
    }

    /// Drops an intent whose change did not happen (an aborted upload).
    pub async fn drop_intent(&self, intent_id: Uuid) -> Result<(), StoreError> {
        with_conn!(self, writer, |conn| {
            sqlx::query("DELETE FROM file_intents WHERE intent_id = $1")
                .bind(intent_id.to_string())
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Intents left by a server that stopped mid-change.
    pub async fn pending_intents(&self) -> Result<Vec<Intent>, StoreError> {
        self.intents_where("", None).await
    }

    /// Intents begun by replicas not seen for `silence` (or by no replica): those of replicas
    /// that stopped mid-change, which the leader settles. PostgreSQL only (replicas).
    pub async fn intents_of_stopped_replicas(&self, silence: std::time::Duration) -> Result<Vec<Intent>, StoreError> {
        let seen_since = to_micros(super::now()) - i64::try_from(silence.as_micros()).unwrap_or(i64::MAX);
        let condition =
            " WHERE replica_id IS NULL OR replica_id NOT IN (SELECT replica_id FROM replicas WHERE seen_at > $1)";
        self.intents_where(condition, Some(seen_since)).await
    }

    async fn intents_where(&self, condition: &str, parameter: Option<i64>) -> Result<Vec<Intent>, StoreError> {
        let sql = format!("SELECT intent_id, kind, mission_id, path FROM file_intents{condition} ORDER BY created_at");
        with_conn!(self, reader, |conn| {
            let mut query = sqlx::query(&sql);
            if let Some(value) = parameter {
                query = query.bind(value);
            }
            let rows = query.fetch_all(conn).await?;
            rows.iter()
                .map(|r| {
                    Ok(Intent {
                        intent_id: r.uuid("intent_id")?,
                        kind: if r.text("kind")? == "delete" { IntentKind::Delete } else { IntentKind::Upload },
                        mission_id: r.uuid("mission_id")?,
                        path: r.text("path")?,
                    })
                })
                .collect()
        })
    }

    /// Commits an uploaded file (insert or replace), ends its intent and records the
    /// `files.changed` event in one transaction: on SQLite one script (one turn of the single
    /// writer), on PostgreSQL the intent's deletion as a data-modifying `WITH`, then the event.
    /// Should the intent's deletion not happen, the intent's row already matches its object and
    /// recovery just drops it.
    pub async fn commit_file(&self, intent_id: Uuid, file: &FileRecord) -> Result<(), StoreError> {
        const SQLITE: &str = concat!(
            "BEGIN IMMEDIATE; ",
            upsert_file!(),
            "; DELETE FROM file_intents WHERE intent_id = $8; ",
            sqlite_append_events!("$9"),
            "; ",
            sqlite_append_audit!("$10"),
            "; COMMIT"
        );
        const POSTGRES: &str =
            concat!("WITH ended AS (DELETE FROM file_intents WHERE intent_id = $8) ", upsert_file!());
        let event = events_json(&[NewEvent::files_changed(file.mission_id, &file.path, "uploaded", file.modified_at)]);
        // A macro, not a closure: the query's type differs by backend.
        macro_rules! query {
            ($sql:expr) => {
                sqlx::query($sql)
                    .bind(file.mission_id.to_string())
                    .bind(&file.path)
                    .bind(file.user_id.to_string())
                    .bind(file.size as i64)
                    .bind(&file.sha256)
                    .bind(&file.e_tag)
                    .bind(to_micros(file.modified_at))
                    .bind(intent_id.to_string())
            };
        }
        match &self.backend {
            super::Backend::Sqlite(db) => {
                let audit = super::audit::notes_json(&super::audit::take());
                super::sqlite::run_script(&mut *db.writer().await, query!(SQLITE).bind(event).bind(audit)).await?;
                self.events_appended();
            }
            super::Backend::Postgres(db) => {
                let mut conn = db.connection().await?;
                let mut tx = conn.begin().await?;
                query!(POSTGRES).execute(&mut *tx).await?;
                commit_with_events!(self, tx, event);
            }
        }
        Ok(())
    }

    /// Removes a file's row, recording the `files.changed` event; true when there was one.
    pub async fn delete_file_row(&self, mission_id: Uuid, path: &str) -> Result<bool, StoreError> {
        let event = events_json(&[NewEvent::files_changed(mission_id, path, "deleted", super::now())]);
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            let deleted = sqlx::query("DELETE FROM mission_files WHERE mission_id = $1 AND path = $2")
                .bind(mission_id.to_string())
                .bind(path)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if deleted == 0 {
                return Ok(false);
            }
            commit_with_events!(self, tx, event);
            Ok(true)
        })
    }

    /// One file of a mission.
    pub async fn mission_file(&self, mission_id: Uuid, path: &str) -> Result<Option<FileRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!("SELECT {FILE_COLUMNS} FROM mission_files WHERE mission_id = $1 AND path = $2"))
                    .bind(mission_id.to_string())
                    .bind(path)
                    .fetch_optional(conn)
                    .await?
            };
            row.as_ref().map(file_from_row).transpose()
        })
    }

    /// Every file of a mission, by path.
    pub async fn mission_files(&self, mission_id: Uuid) -> Result<Vec<FileRecord>, StoreError> {
        with_conn!(self, reader, |conn| {
            let rows = {
                sqlx::query(&format!("SELECT {FILE_COLUMNS} FROM mission_files WHERE mission_id = $1 ORDER BY path"))
                    .bind(mission_id.to_string())
                    .fetch_all(conn)
                    .await?
            };
            rows.iter().map(file_from_row).collect()
        })
    }

    /// A file of the mission that `path` cannot sit beside: one whose path is a folder of
    /// `path` (`a` for `a/b`), or one inside `path` as a folder (`a/b` for `a`).
    pub async fn path_conflict(&self, mission_id: Uuid, path: &str) -> Result<Option<String>, StoreError> {
        let folders: Vec<&str> = path.match_indices('/').map(|(i, _)| &path[..i]).collect();
        let placeholders: Vec<String> = (0..folders.len()).map(|i| format!("${}", i + 4)).collect();
        let sql = format!(
            "SELECT path FROM mission_files WHERE mission_id = $1 \
             AND (substr(path, 1, $2) = $3 OR path IN ({})) LIMIT 1",
            if placeholders.is_empty() { "NULL".to_owned() } else { placeholders.join(", ") }
        );
        let prefix_chars = i32::try_from(path.chars().count() + 1).unwrap_or(i32::MAX);
        Ok(with_conn!(self, reader, |conn| {
            let mut query = sqlx::query_scalar::<_, String>(&sql)
                .bind(mission_id.to_string())
                .bind(prefix_chars)
                .bind(format!("{path}/"));
            for folder in &folders {
                query = query.bind(*folder);
            }
            query.fetch_optional(conn).await?
        }))
    }

    /// What the file limits need to know before an upload of `path`, in one query.
    pub async fn upload_usage(&self, mission_id: Uuid, user_id: Uuid, path: &str) -> Result<UploadUsage, StoreError> {
        with_conn!(self, reader, |conn| {
            let row = {
                sqlx::query(&format!(
                    "SELECT (SELECT size FROM mission_files WHERE mission_id = $1 AND path = $2) AS existing_size, \
                     COALESCE((SELECT files FROM mission_file_usage WHERE mission_id = $1), 0) AS mission_files, \
                     COALESCE((SELECT bytes FROM user_file_usage WHERE user_id = $3), 0) + {} AS user_bytes",
                    super::images::archive_bytes_of("$3")
                ))
                .bind(mission_id.to_string())
                .bind(path)
                .bind(user_id.to_string())
                .fetch_one(conn)
                .await?
            };
            usage_from_row(&row)
        })
    }

    /// Reserves room for an upload of `size` bytes to `path` under the file limits, on its
    /// intent: the usage `check` sees counts what is committed and what other uploads in flight
    /// reserved, and the check and the reservation are one transaction that holds the owner's
    /// row (SQLite's single writer; a row lock on PostgreSQL), so parallel uploads cannot all
    /// pass. Nothing is reserved when `check` refuses.
    pub async fn reserve_upload<E>(
        &self,
        intent_id: Uuid,
        user_id: Uuid,
        size: u64,
        check: impl FnOnce(UploadUsage) -> Result<(), E>,
    ) -> Result<Result<(), E>, StoreError> {
        let lock_owner = format!("SELECT user_id FROM users WHERE user_id = $1{}", self.for_update());
        with_conn!(self, writer, |conn| {
            let mut tx = conn.begin().await?;
            sqlx::query(&lock_owner).bind(user_id.to_string()).execute(&mut *tx).await?;
            let row = sqlx::query(&format!(
                "SELECT \
                 (SELECT size FROM mission_files f WHERE f.mission_id = i.mission_id AND f.path = i.path) \
                   AS existing_size, \
                 COALESCE((SELECT files FROM mission_file_usage u WHERE u.mission_id = i.mission_id), 0) \
                   + (SELECT COUNT(*) FROM file_intents o \
                      WHERE o.mission_id = i.mission_id AND o.intent_id != i.intent_id AND o.new_file) \
                   AS mission_files, \
                 COALESCE((SELECT bytes FROM user_file_usage u WHERE u.user_id = $2), 0) \
                   + (SELECT CAST(COALESCE(SUM(reserved_bytes), 0) AS BIGINT) FROM file_intents o \
                      WHERE o.user_id = $2 AND o.intent_id != i.intent_id) \
                   + {} AS user_bytes \
                 FROM file_intents i WHERE i.intent_id = $1",
                super::images::archive_bytes_of("$2")
            ))
            .bind(intent_id.to_string())
            .bind(user_id.to_string())
            .fetch_one(&mut *tx)
            .await?;
            let usage = usage_from_row(&row)?;
            if let Err(refusal) = check(usage) {
                return Ok(Err(refusal));
            }
            // What the upload adds once committed: its growth of the owner's bytes, and a file
            // where the path is new.
            let growth = size.saturating_sub(usage.existing_size.unwrap_or(0));
            sqlx::query(
                "UPDATE file_intents SET user_id = $1, reserved_bytes = $2, new_file = $3 WHERE intent_id = $4",
            )
            .bind(user_id.to_string())
            .bind(growth as i64)
            .bind(usage.existing_size.is_none())
            .bind(intent_id.to_string())
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(Ok(()))
        })
    }

    /// Whether a mission with this id exists.
    pub async fn mission_exists(&self, mission_id: Uuid) -> Result<bool, StoreError> {
        let n: i64 = with_conn!(self, reader, |conn| {
            sqlx::query_scalar("SELECT COUNT(*) FROM missions WHERE mission_id = $1")
                .bind(mission_id.to_string())
                .fetch_one(conn)
                .await?
        });
        Ok(n > 0)
    }

    /// Files a mission holds plus changes of them in flight: a mission's source storage may
    /// change only while this is zero.
    pub async fn mission_file_activity(&self, mission_id: Uuid) -> Result<u64, StoreError> {
        let n: i64 = with_conn!(self, reader, |conn| {
            sqlx::query_scalar(
                "SELECT COALESCE((SELECT files FROM mission_file_usage WHERE mission_id = $1), 0) \
                 + (SELECT COUNT(*) FROM file_intents WHERE mission_id = $1)",
            )
            .bind(mission_id.to_string())
            .fetch_one(conn)
            .await?
        });
        Ok(n as u64)
    }
}

fn usage_from_row(r: &impl Columns) -> Result<UploadUsage, StoreError> {
    Ok(UploadUsage {
        existing_size: r.opt_int("existing_size")?.map(|n| n as u64),
        mission_files: r.count("mission_files")?,
        user_bytes: r.count("user_bytes")?,
    })
}

pub(super) fn file_from_row(r: &impl Columns) -> Result<FileRecord, StoreError> {
    Ok(FileRecord {
        mission_id: r.uuid("mission_id")?,
        path: r.text("path")?,
        user_id: r.uuid("user_id")?,
        size: r.count("size")?,
        sha256: r.text("sha256")?,
        e_tag: r.opt_text("e_tag")?,
        modified_at: r.time("modified_at")?,
    })
}
