//! The SQLite backend of [`Store`]: one file under the data dir, WAL mode, a few reading
//! connections and one writing.

mod jobs;
mod stations;

use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use mission_api::Mission;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteRow, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use super::{
    CargoBayRecord, DeviceCodeRecord, DeviceCodeStatus, FileRecord, Intent, IntentKind, MissionChanges, MissionFilter,
    RefreshTokenRecord, StoreError, UploadUsage, UserRecord, from_micros, to_micros,
};

/// Migrations, embedded so the binary carries its schema.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../../migrations/sqlite/0001_init.sql")),
    (2, "files", include_str!("../../migrations/sqlite/0002_files.sql")),
    (3, "cargo_bays", include_str!("../../migrations/sqlite/0003_cargo_bays.sql")),
    (4, "stations", include_str!("../../migrations/sqlite/0004_stations.sql")),
    (5, "jobs", include_str!("../../migrations/sqlite/0005_jobs.sql")),
    (6, "upload_reservations", include_str!("../../migrations/sqlite/0006_upload_reservations.sql")),
];

/// Columns of `missions` in the order [`mission_from_row`] reads them.
const MISSION_COLUMNS: &str = "mission_id, user_id, name, description, mission_type_id, \
    source_storage_id, destination_storage_id, source_path, destination_path, settings, args, \
    public, archived, created_at, updated_at";

/// Handle to the database; cheap to clone.
///
/// Reads go through a few connections; every write goes through `writer`, one connection,
/// because SQLite admits one writer at a time and writers racing for its lock back off by
/// sleeping (milliseconds each), while waiting for our own connection costs nothing.
/// Connections are held behind locks rather than in an sqlx pool: the pool pings a connection on
/// every release, one more round trip to the connection's worker thread per query (and the next
/// query on that connection waits behind it).
#[derive(Clone, Debug)]
pub struct Store {
    readers: Arc<Readers>,
    writer: Arc<tokio::sync::Mutex<SqliteConnection>>,
}

/// How many connections serve reads.
const READERS: usize = 4;

/// The reading connections.
#[derive(Debug)]
struct Readers {
    connections: Vec<tokio::sync::Mutex<SqliteConnection>>,
    next: AtomicUsize,
}

impl Store {
    /// Opens (creating if needed) the database at `url` (`sqlite://PATH`) and migrates it.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        if !url.starts_with("sqlite:") {
            return Err(StoreError::UnsupportedUrl(url.to_owned()));
        }
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        // The database and its WAL and shared-memory files (which SQLite makes with the
        // database's mode) are the server's alone.
        let file = options.get_filename().to_owned();
        if file != std::path::Path::new(":memory:") {
            crate::fsutil::private_file(&file, true).map_err(sqlx::Error::Io)?;
            for suffix in ["-wal", "-shm"] {
                let mut companion = file.clone().into_os_string();
                companion.push(suffix);
                crate::fsutil::private_file(std::path::Path::new(&companion), false).map_err(sqlx::Error::Io)?;
            }
        }
        let mut writer = options.connect().await?;
        let migrator = Migrator {
            migrations: Cow::Owned(
                MIGRATIONS
                    .iter()
                    .map(|(version, name, sql)| {
                        Migration::new(*version, Cow::Borrowed(name), MigrationType::Simple, Cow::Borrowed(sql), false)
                    })
                    .collect(),
            ),
            ..Migrator::DEFAULT
        };
        migrator.run(&mut writer).await?;
        let mut connections = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            connections.push(tokio::sync::Mutex::new(options.connect().await?));
        }
        Ok(Self {
            readers: Arc::new(Readers { connections, next: AtomicUsize::new(0) }),
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
        })
    }

    /// A reading connection, for as long as the guard lives: a free one, or else the next in
    /// turn once it is free.
    async fn reader(&self) -> tokio::sync::MutexGuard<'_, SqliteConnection> {
        let connections = &self.readers.connections;
        let first = self.readers.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..connections.len() {
            if let Ok(connection) = connections[(first + i) % connections.len()].try_lock() {
                return connection;
            }
        }
        connections[first % connections.len()].lock().await
    }

    /// The one writing connection, for as long as the guard lives.
    async fn writer(&self) -> tokio::sync::MutexGuard<'_, SqliteConnection> {
        self.writer.lock().await
    }

    /// Checks the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&mut *self.reader().await).await?;
        Ok(())
    }

    // ---- users ----

    /// Creates a user; a taken username or external `sub` is a [`StoreError::Conflict`].
    pub async fn insert_user(&self, user: &UserRecord) -> Result<(), StoreError> {
        let result = sqlx::query(
            "INSERT INTO users (user_id, username, password_hash, external_sub, admin, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(user.user_id.to_string())
        .bind(&user.username)
        .bind(&user.password_hash)
        .bind(&user.external_sub)
        .bind(user.admin)
        .bind(to_micros(user.created_at))
        .execute(&mut *self.writer().await)
        .await;
        conflict_on_duplicate(result, || format!("a user named {:?} already exists", user.username))
    }

    /// Replaces a user's password hash and admin flag.
    pub async fn update_user_credentials(
        &self,
        user_id: Uuid,
        password_hash: &str,
        admin: bool,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET password_hash = ?, admin = ? WHERE user_id = ?")
            .bind(password_hash)
            .bind(admin)
            .bind(user_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(())
    }

    /// Number of users.
    pub async fn count_users(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users").fetch_one(&mut *self.reader().await).await?)
    }

    /// The user with this id.
    pub async fn user_by_id(&self, user_id: Uuid) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("user_id", &user_id.to_string()).await
    }

    /// The built-in user with this login name.
    pub async fn user_by_username(&self, username: &str) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("username", username).await
    }

    /// The user an external provider knows by `sub`.
    pub async fn user_by_external_sub(&self, sub: &str) -> Result<Option<UserRecord>, StoreError> {
        self.user_where("external_sub", sub).await
    }

    async fn user_where(&self, column: &str, value: &str) -> Result<Option<UserRecord>, StoreError> {
        let sql = format!(
            "SELECT user_id, username, password_hash, external_sub, admin, created_at FROM users WHERE {column} = ?"
        );
        let row = sqlx::query(&sql).bind(value).fetch_optional(&mut *self.reader().await).await?;
        row.map(|r| {
            Ok(UserRecord {
                user_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
                username: r.try_get(1)?,
                password_hash: r.try_get(2)?,
                external_sub: r.try_get(3)?,
                admin: r.try_get(4)?,
                created_at: from_micros(r.try_get(5)?)?,
            })
        })
        .transpose()
    }

    // ---- device codes ----

    /// Stores a new device authorization, dropping those expired more than a minute ago on the
    /// way (the minute in which polling them still gets `expired_token`). A clash of user codes
    /// is a [`StoreError::Conflict`] (the caller draws another).
    pub async fn insert_device_code(&self, code: &DeviceCodeRecord, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM device_codes WHERE expires_at < ?")
            .bind(to_micros(now) - 60_000_000)
            .execute(&mut *self.writer().await)
            .await?;
        let result = sqlx::query(
            "INSERT INTO device_codes (device_code_hash, user_code, client_id, scope, status, user_id, \
             interval_secs, last_polled_at, expires_at, created_at) VALUES (?, ?, ?, ?, ?, NULL, ?, NULL, ?, ?)",
        )
        .bind(&code.device_code_hash)
        .bind(&code.user_code)
        .bind(&code.client_id)
        .bind(&code.scope)
        .bind(code.status.as_str())
        .bind(code.interval_secs)
        .bind(to_micros(code.expires_at))
        .bind(to_micros(now))
        .execute(&mut *self.writer().await)
        .await;
        conflict_on_duplicate(result, || "user code already in use".into())
    }

    /// The device authorization with this user code.
    pub async fn device_code_by_user_code(&self, user_code: &str) -> Result<Option<DeviceCodeRecord>, StoreError> {
        self.device_code_where("user_code", user_code).await
    }

    /// Records a poll of the device code with this hash and returns the record as it was before
    /// the poll (so the caller can compare `last_polled_at` with the interval).
    pub async fn poll_device_code(
        &self,
        device_code_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<DeviceCodeRecord>, StoreError> {
        let mut writer = self.writer().await;
        let mut tx = writer.begin().await?;
        let record = fetch_device_code(&mut tx, "device_code_hash", device_code_hash).await?;
        if record.is_some() {
            sqlx::query("UPDATE device_codes SET last_polled_at = ? WHERE device_code_hash = ?")
                .bind(to_micros(now))
                .bind(device_code_hash)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(record)
    }

    /// Adds `by` seconds to a device code's polling interval (after a `slow_down`).
    pub async fn slow_down_device_code(&self, device_code_hash: &str, by: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE device_codes SET interval_secs = interval_secs + ? WHERE device_code_hash = ?")
            .bind(by)
            .bind(device_code_hash)
            .execute(&mut *self.writer().await)
            .await?;
        Ok(())
    }

    /// Approves (`Some(user)`) or denies (`None`) a pending, unexpired device code. Returns whether
    /// a pending code was found and changed.
    pub async fn decide_device_code(
        &self,
        user_code: &str,
        user_id: Option<Uuid>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let status = if user_id.is_some() { DeviceCodeStatus::Approved } else { DeviceCodeStatus::Denied };
        let done = sqlx::query(
            "UPDATE device_codes SET status = ?, user_id = ? \
             WHERE user_code = ? AND status = 'pending' AND expires_at > ?",
        )
        .bind(status.as_str())
        .bind(user_id.map(|u| u.to_string()))
        .bind(user_code)
        .bind(to_micros(now))
        .execute(&mut *self.writer().await)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Marks an approved device code consumed; true when this call did it (exactly one poller
    /// gets tokens for a code).
    pub async fn consume_device_code(&self, device_code_hash: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE device_codes SET status = 'consumed' WHERE device_code_hash = ? AND status = 'approved'",
        )
        .bind(device_code_hash)
        .execute(&mut *self.writer().await)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn device_code_where(&self, column: &str, value: &str) -> Result<Option<DeviceCodeRecord>, StoreError> {
        let mut conn = self.reader().await;
        fetch_device_code(&mut conn, column, value).await
    }

    // ---- refresh tokens ----

    /// Stores a refresh token by its hash.
    pub async fn insert_refresh_token(
        &self,
        token_hash: &str,
        record: &RefreshTokenRecord,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO refresh_tokens (token_hash, user_id, client_id, scope, created_at, expires_at, revoked_at) \
             VALUES (?, ?, ?, ?, ?, ?, NULL)",
        )
        .bind(token_hash)
        .bind(record.user_id.to_string())
        .bind(&record.client_id)
        .bind(&record.scope)
        .bind(to_micros(now))
        .bind(to_micros(record.expires_at))
        .execute(&mut *self.writer().await)
        .await?;
        Ok(())
    }

    /// The refresh token with this hash, revoked or not.
    pub async fn refresh_token(&self, token_hash: &str) -> Result<Option<RefreshTokenRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT user_id, client_id, scope, expires_at, revoked_at FROM refresh_tokens WHERE token_hash = ?",
        )
        .bind(token_hash)
        .fetch_optional(&mut *self.reader().await)
        .await?;
        row.map(|r| {
            Ok(RefreshTokenRecord {
                user_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
                client_id: r.try_get(1)?,
                scope: r.try_get(2)?,
                expires_at: from_micros(r.try_get(3)?)?,
                revoked_at: r.try_get::<Option<i64>, _>(4)?.map(from_micros).transpose()?,
            })
        })
        .transpose()
    }

    /// Revokes a refresh token; true when it existed and was live.
    pub async fn revoke_refresh_token(&self, token_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE refresh_tokens SET revoked_at = ? WHERE token_hash = ? AND revoked_at IS NULL")
            .bind(to_micros(now))
            .bind(token_hash)
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    // ---- missions ----

    /// Stores a new mission.
    pub async fn insert_mission(&self, mission: &Mission) -> Result<(), StoreError> {
        self.insert_missions(std::slice::from_ref(mission)).await
    }

    /// The mission with this id, whoever owns it.
    pub async fn mission(&self, mission_id: Uuid) -> Result<Option<Mission>, StoreError> {
        let row = sqlx::query(&format!("SELECT {MISSION_COLUMNS} FROM missions WHERE mission_id = ?"))
            .bind(mission_id.to_string())
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.as_ref().map(mission_from_row).transpose()
    }

    /// One page of missions matching `filter`, newest first, plus whether more follow.
    ///
    /// A user's view (own or public) without an id or name filter is the union of two
    /// index-ordered scans, each cut at the page's end: SQLite answers `user_id = ? OR public = 1`
    /// by collecting and sorting every visible row, which costs milliseconds at 100,000 missions.
    /// With an id or name filter the plain `OR` form is best, as the id or name index leaves a
    /// handful of rows (both plans measured by `cargo bench --bench missions_api`).
    pub async fn list_missions(&self, filter: &MissionFilter) -> Result<(Vec<Mission>, bool), StoreError> {
        let items = i64::from(filter.items);
        let offset = (i64::from(filter.page) - 1) * items;
        const ORDER: &str = " ORDER BY created_at DESC, mission_id DESC";
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new(format!("SELECT {MISSION_COLUMNS} FROM "));
        let selective = !filter.mission_ids.is_empty() || !filter.names.is_empty();
        match filter.visible_to {
            None => {
                q.push("missions WHERE 1 = 1");
                push_filters(&mut q, filter);
            }
            Some(viewer) if selective => {
                q.push("missions WHERE (user_id = ").push_bind(viewer.to_string()).push(" OR public = 1)");
                push_filters(&mut q, filter);
            }
            Some(viewer) => {
                let arm = |q: &mut QueryBuilder<Sqlite>, visibility: &str, bind_viewer: bool| {
                    q.push(format!("(SELECT {MISSION_COLUMNS} FROM missions WHERE {visibility}"));
                    if bind_viewer {
                        q.push_bind(viewer.to_string());
                    }
                    push_filters(q, filter);
                    q.push(ORDER).push(" LIMIT ").push_bind(offset + items + 1).push(")");
                };
                q.push("(SELECT * FROM ");
                arm(&mut q, "user_id = ", true);
                q.push(" UNION SELECT * FROM ");
                arm(&mut q, "public = 1", false);
                q.push(")");
            }
        }
        q.push(ORDER).push(" LIMIT ").push_bind(items + 1).push(" OFFSET ").push_bind(offset);
        let rows = q.build().fetch_all(&mut *self.reader().await).await?;
        let has_more = rows.len() as i64 > items;
        let missions = rows.iter().take(filter.items as usize).map(mission_from_row).collect::<Result<_, _>>()?;
        Ok((missions, has_more))
    }

    /// Applies `changes` to a mission and returns it as it now is (`None` when it is gone).
    pub async fn update_mission(
        &self,
        mission_id: Uuid,
        changes: &MissionChanges,
        now: DateTime<Utc>,
    ) -> Result<Option<Mission>, StoreError> {
        let mut q: QueryBuilder<Sqlite> = QueryBuilder::new("UPDATE missions SET updated_at = ");
        q.push_bind(to_micros(now));
        let mut set = |column: &str, value: Option<String>| {
            if let Some(v) = value {
                q.push(format!(", {column} = ")).push_bind(v);
            }
        };
        set("name", changes.name.clone());
        set("description", changes.description.clone());
        set("source_storage_id", changes.source_storage_id.map(|u| u.to_string()));
        set("destination_storage_id", changes.destination_storage_id.map(|u| u.to_string()));
        set("source_path", changes.source_path.clone());
        set("destination_path", changes.destination_path.clone());
        set("settings", changes.settings.as_ref().map(to_json));
        set("args", changes.args.as_ref().map(to_json));
        if let Some(archived) = changes.archived {
            q.push(", archived = ").push_bind(archived);
        }
        q.push(" WHERE mission_id = ").push_bind(mission_id.to_string());
        q.push(format!(" RETURNING {MISSION_COLUMNS}"));
        let row = q.build().fetch_optional(&mut *self.writer().await).await?;
        row.as_ref().map(mission_from_row).transpose()
    }

    /// Deletes a mission; true when it existed.
    pub async fn delete_mission(&self, mission_id: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM missions WHERE mission_id = ?")
            .bind(mission_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Inserts many missions in one transaction (benchmarks and imports).
    pub async fn insert_missions(&self, missions: &[Mission]) -> Result<(), StoreError> {
        let mut writer = self.writer().await;
        let mut tx = writer.begin().await?;
        for m in missions {
            sqlx::query(&format!(
                "INSERT INTO missions ({MISSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ))
            .bind(m.mission_id.to_string())
            .bind(m.user_id.to_string())
            .bind(&m.name)
            .bind(&m.description)
            .bind(m.mission_type_id.map(|u| u.to_string()))
            .bind(m.source_storage_id.map(|u| u.to_string()))
            .bind(m.destination_storage_id.map(|u| u.to_string()))
            .bind(&m.source_path)
            .bind(&m.destination_path)
            .bind(to_json(&m.settings))
            .bind(to_json(&m.args))
            .bind(m.public)
            .bind(m.archived)
            .bind(to_micros(m.created_at))
            .bind(to_micros(m.updated_at))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

impl Store {
    // ---- mission files ----

    /// Records that a change of a mission file is about to touch its object.
    pub async fn begin_intent(&self, intent: &Intent) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO file_intents (intent_id, kind, mission_id, path, created_at) VALUES (?, ?, ?, ?, ?)")
            .bind(intent.intent_id.to_string())
            .bind(match intent.kind {
                IntentKind::Upload => "upload",
                IntentKind::Delete => "delete",
            })
            .bind(intent.mission_id.to_string())
            .bind(&intent.path)
            .bind(to_micros(super::now()))
            .execute(&mut *self.writer().await)
            .await?;
        Ok(())
    }

    /// Drops an intent whose change did not happen (an aborted upload).
    pub async fn drop_intent(&self, intent_id: Uuid) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM file_intents WHERE intent_id = ?")
            .bind(intent_id.to_string())
            .execute(&mut *self.writer().await)
            .await?;
        Ok(())
    }

    /// Intents left by a server that stopped mid-change.
    pub async fn pending_intents(&self) -> Result<Vec<Intent>, StoreError> {
        let rows = sqlx::query("SELECT intent_id, kind, mission_id, path FROM file_intents ORDER BY created_at")
            .fetch_all(&mut *self.reader().await)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Intent {
                    intent_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
                    kind: if r.try_get::<String, _>(1)? == "delete" { IntentKind::Delete } else { IntentKind::Upload },
                    mission_id: parse_uuid(&r.try_get::<String, _>(2)?)?,
                    path: r.try_get(3)?,
                })
            })
            .collect()
    }

    /// Commits an uploaded file (insert or replace) and ends its intent: two statements sent as
    /// one script, so one turn of the single writer. Should the intent's deletion not happen, the
    /// intent's row already matches its object and recovery just drops it.
    pub async fn commit_file(&self, intent_id: Uuid, file: &FileRecord) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO mission_files (mission_id, path, user_id, size, sha256, e_tag, modified_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (mission_id, path) DO UPDATE SET \
             user_id = excluded.user_id, size = excluded.size, sha256 = excluded.sha256, \
             e_tag = excluded.e_tag, modified_at = excluded.modified_at; \
             DELETE FROM file_intents WHERE intent_id = ?",
        )
        .bind(file.mission_id.to_string())
        .bind(&file.path)
        .bind(file.user_id.to_string())
        .bind(file.size as i64)
        .bind(&file.sha256)
        .bind(&file.e_tag)
        .bind(to_micros(file.modified_at))
        .bind(intent_id.to_string())
        .execute(&mut *self.writer().await)
        .await?;
        Ok(())
    }

    /// Removes a file's row; true when there was one.
    pub async fn delete_file_row(&self, mission_id: Uuid, path: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM mission_files WHERE mission_id = ? AND path = ?")
            .bind(mission_id.to_string())
            .bind(path)
            .execute(&mut *self.writer().await)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// One file of a mission.
    pub async fn mission_file(&self, mission_id: Uuid, path: &str) -> Result<Option<FileRecord>, StoreError> {
        let row = sqlx::query(&format!("SELECT {FILE_COLUMNS} FROM mission_files WHERE mission_id = ? AND path = ?"))
            .bind(mission_id.to_string())
            .bind(path)
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.as_ref().map(file_from_row).transpose()
    }

    /// Every file of a mission, by path.
    pub async fn mission_files(&self, mission_id: Uuid) -> Result<Vec<FileRecord>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {FILE_COLUMNS} FROM mission_files WHERE mission_id = ? ORDER BY path"))
            .bind(mission_id.to_string())
            .fetch_all(&mut *self.reader().await)
            .await?;
        rows.iter().map(file_from_row).collect()
    }

    /// A file of the mission that `path` cannot sit beside: one whose path is a folder of
    /// `path` (`a` for `a/b`), or one inside `path` as a folder (`a/b` for `a`).
    pub async fn path_conflict(&self, mission_id: Uuid, path: &str) -> Result<Option<String>, StoreError> {
        let folders: Vec<&str> = path.match_indices('/').map(|(i, _)| &path[..i]).collect();
        let placeholders = vec!["?"; folders.len()].join(", ");
        let query = format!(
            "SELECT path FROM mission_files WHERE mission_id = ? \
             AND (substr(path, 1, ?) = ? OR path IN ({})) LIMIT 1",
            if placeholders.is_empty() { "NULL" } else { &placeholders }
        );
        let mut query = sqlx::query_scalar::<_, String>(&query)
            .bind(mission_id.to_string())
            .bind(path.len() as i64 + 1)
            .bind(format!("{path}/"));
        for folder in folders {
            query = query.bind(folder);
        }
        Ok(query.fetch_optional(&mut *self.reader().await).await?)
    }

    /// What the file limits need to know before an upload of `path`, in one query.
    pub async fn upload_usage(&self, mission_id: Uuid, user_id: Uuid, path: &str) -> Result<UploadUsage, StoreError> {
        let row = sqlx::query(
            "SELECT (SELECT size FROM mission_files WHERE mission_id = ?1 AND path = ?2), \
             COALESCE((SELECT files FROM mission_file_usage WHERE mission_id = ?1), 0), \
             COALESCE((SELECT bytes FROM user_file_usage WHERE user_id = ?3), 0)",
        )
        .bind(mission_id.to_string())
        .bind(path)
        .bind(user_id.to_string())
        .fetch_one(&mut *self.reader().await)
        .await?;
        Ok(UploadUsage {
            existing_size: row.try_get::<Option<i64>, _>(0)?.map(|n| n as u64),
            mission_files: row.try_get::<i64, _>(1)? as u64,
            user_bytes: row.try_get::<i64, _>(2)? as u64,
        })
    }

    /// Reserves room for an upload of `size` bytes to `path` under the file limits, on its
    /// intent: the usage `check` sees counts what is committed and what other uploads in flight
    /// reserved, and the check and the reservation are one turn of the single writer, so
    /// parallel uploads cannot all pass. Nothing is reserved when `check` refuses.
    pub async fn reserve_upload<E>(
        &self,
        intent_id: Uuid,
        user_id: Uuid,
        size: u64,
        check: impl FnOnce(UploadUsage) -> Result<(), E>,
    ) -> Result<Result<(), E>, StoreError> {
        let mut writer = self.writer().await;
        let row = sqlx::query(
            "SELECT \
             (SELECT size FROM mission_files f WHERE f.mission_id = i.mission_id AND f.path = i.path) \
               AS existing_size, \
             COALESCE((SELECT files FROM mission_file_usage u WHERE u.mission_id = i.mission_id), 0) \
               + COALESCE((SELECT SUM(new_file) FROM file_intents o \
                           WHERE o.mission_id = i.mission_id AND o.intent_id != i.intent_id), 0) \
               AS mission_files, \
             COALESCE((SELECT bytes FROM user_file_usage u WHERE u.user_id = ?2), 0) \
               + COALESCE((SELECT SUM(reserved_bytes) FROM file_intents o \
                           WHERE o.user_id = ?2 AND o.intent_id != i.intent_id), 0) \
               AS user_bytes \
             FROM file_intents i WHERE i.intent_id = ?1",
        )
        .bind(intent_id.to_string())
        .bind(user_id.to_string())
        .fetch_one(&mut *writer)
        .await?;
        let usage = UploadUsage {
            existing_size: row.try_get::<Option<i64>, _>("existing_size")?.map(|n| n as u64),
            mission_files: row.try_get::<i64, _>("mission_files")? as u64,
            user_bytes: row.try_get::<i64, _>("user_bytes")? as u64,
        };
        if let Err(refusal) = check(usage) {
            return Ok(Err(refusal));
        }
        // What the upload adds once committed: its growth of the owner's bytes, and a file
        // where the path is new.
        let growth = size.saturating_sub(usage.existing_size.unwrap_or(0));
        sqlx::query("UPDATE file_intents SET user_id = ?, reserved_bytes = ?, new_file = ? WHERE intent_id = ?")
            .bind(user_id.to_string())
            .bind(growth as i64)
            .bind(usage.existing_size.is_none())
            .bind(intent_id.to_string())
            .execute(&mut *writer)
            .await?;
        Ok(Ok(()))
    }

    /// Whether a mission with this id exists.
    pub async fn mission_exists(&self, mission_id: Uuid) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM missions WHERE mission_id = ?")
            .bind(mission_id.to_string())
            .fetch_one(&mut *self.reader().await)
            .await?;
        Ok(n > 0)
    }
}

impl Store {
    // ---- cargo bays ----

    /// Adds a cargo bay.
    pub async fn insert_cargo_bay(&self, record: &CargoBayRecord) -> Result<(), StoreError> {
        let bay = &record.bay;
        let owner = bay.user_id.ok_or_else(|| StoreError::Corrupt("a stored cargo bay needs an owner".into()))?;
        let created_at =
            bay.created_at.ok_or_else(|| StoreError::Corrupt("a stored cargo bay needs created_at".into()))?;
        sqlx::query(&format!("INSERT INTO cargo_bays ({BAY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"))
            .bind(bay.storage_id.to_string())
            .bind(owner.to_string())
            .bind(&bay.name)
            .bind(bay.kind.as_str())
            .bind(&bay.bucket)
            .bind(&bay.prefix)
            .bind(&bay.endpoint)
            .bind(&bay.region)
            .bind(&bay.path)
            .bind(&record.sealed_credentials)
            .bind(to_micros(created_at))
            .execute(&mut *self.writer().await)
            .await?;
        Ok(())
    }

    /// One cargo bay.
    pub async fn cargo_bay(&self, storage_id: Uuid) -> Result<Option<CargoBayRecord>, StoreError> {
        let row = sqlx::query(&format!("SELECT {BAY_COLUMNS} FROM cargo_bays WHERE storage_id = ?"))
            .bind(storage_id.to_string())
            .fetch_optional(&mut *self.reader().await)
            .await?;
        row.as_ref().map(bay_from_row).transpose()
    }

    /// The cargo bays of `owner`, or of everyone when `None`, oldest first.
    pub async fn cargo_bays(&self, owner: Option<Uuid>) -> Result<Vec<CargoBayRecord>, StoreError> {
        let rows = match owner {
            Some(user) => {
                sqlx::query(&format!(
                    "SELECT {BAY_COLUMNS} FROM cargo_bays WHERE user_id = ? ORDER BY created_at, storage_id"
                ))
                .bind(user.to_string())
                .fetch_all(&mut *self.reader().await)
                .await?
            }
            None => {
                sqlx::query(&format!("SELECT {BAY_COLUMNS} FROM cargo_bays ORDER BY created_at, storage_id"))
                    .fetch_all(&mut *self.reader().await)
                    .await?
            }
        };
        rows.iter().map(bay_from_row).collect()
    }

    /// Deletes a cargo bay unless a mission still names it; `Ok(false)` when there is no such
    /// bay, [`StoreError::Conflict`] saying how many missions use it otherwise.
    pub async fn delete_cargo_bay(&self, storage_id: Uuid) -> Result<bool, StoreError> {
        let id = storage_id.to_string();
        let mut writer = self.writer().await;
        let mut tx = writer.begin().await?;
        let users: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM missions WHERE source_storage_id = ?1 OR destination_storage_id = ?1",
        )
        .bind(&id)
        .fetch_one(&mut *tx)
        .await?;
        if users > 0 {
            return Err(StoreError::Conflict(format!(
                "cargo bay {storage_id} is named by {users} mission(s); point them elsewhere or delete them first"
            )));
        }
        let done = sqlx::query("DELETE FROM cargo_bays WHERE storage_id = ?").bind(&id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(done.rows_affected() == 1)
    }

    /// Files a mission holds plus changes of them in flight: a mission's source storage may
    /// change only while this is zero.
    pub async fn mission_file_activity(&self, mission_id: Uuid) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COALESCE((SELECT files FROM mission_file_usage WHERE mission_id = ?1), 0) \
             + (SELECT COUNT(*) FROM file_intents WHERE mission_id = ?1)",
        )
        .bind(mission_id.to_string())
        .fetch_one(&mut *self.reader().await)
        .await?;
        Ok(n as u64)
    }
}

/// Columns of `cargo_bays` in the order [`bay_from_row`] reads them.
const BAY_COLUMNS: &str =
    "storage_id, user_id, name, kind, bucket, prefix, endpoint, region, path, credentials, created_at";

fn bay_from_row(r: &SqliteRow) -> Result<CargoBayRecord, StoreError> {
    let kind = match r.try_get::<String, _>(3)?.as_str() {
        "s3" => mission_api::CargoBayKind::S3,
        "local" => mission_api::CargoBayKind::Local,
        other => return Err(StoreError::Corrupt(format!("cargo bay kind {other:?}"))),
    };
    let sealed_credentials: Option<Vec<u8>> = r.try_get(9)?;
    Ok(CargoBayRecord {
        bay: mission_api::CargoBay {
            storage_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
            user_id: Some(parse_uuid(&r.try_get::<String, _>(1)?)?),
            name: r.try_get(2)?,
            kind,
            bucket: r.try_get(4)?,
            prefix: r.try_get(5)?,
            endpoint: r.try_get(6)?,
            region: r.try_get(7)?,
            path: r.try_get(8)?,
            has_credentials: sealed_credentials.is_some(),
            created_at: Some(from_micros(r.try_get(10)?)?),
        },
        sealed_credentials,
    })
}

/// Columns of `mission_files` in the order [`file_from_row`] reads them.
const FILE_COLUMNS: &str = "mission_id, path, user_id, size, sha256, e_tag, modified_at";

fn file_from_row(r: &SqliteRow) -> Result<FileRecord, StoreError> {
    Ok(FileRecord {
        mission_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
        path: r.try_get(1)?,
        user_id: parse_uuid(&r.try_get::<String, _>(2)?)?,
        size: r.try_get::<i64, _>(3)? as u64,
        sha256: r.try_get(4)?,
        e_tag: r.try_get(5)?,
        modified_at: from_micros(r.try_get(6)?)?,
    })
}

async fn fetch_device_code(
    conn: &mut sqlx::SqliteConnection,
    column: &str,
    value: &str,
) -> Result<Option<DeviceCodeRecord>, StoreError> {
    let sql = format!(
        "SELECT device_code_hash, user_code, client_id, scope, status, user_id, interval_secs, \
         last_polled_at, expires_at FROM device_codes WHERE {column} = ?"
    );
    let row = sqlx::query(&sql).bind(value).fetch_optional(conn).await?;
    row.map(|r| {
        Ok(DeviceCodeRecord {
            device_code_hash: r.try_get(0)?,
            user_code: r.try_get(1)?,
            client_id: r.try_get(2)?,
            scope: r.try_get(3)?,
            status: DeviceCodeStatus::parse(&r.try_get::<String, _>(4)?)?,
            user_id: r.try_get::<Option<String>, _>(5)?.as_deref().map(parse_uuid).transpose()?,
            interval_secs: r.try_get(6)?,
            last_polled_at: r.try_get::<Option<i64>, _>(7)?.map(from_micros).transpose()?,
            expires_at: from_micros(r.try_get(8)?)?,
        })
    })
    .transpose()
}

/// Appends the list filters other than visibility as `AND …` terms.
fn push_filters(q: &mut QueryBuilder<Sqlite>, filter: &MissionFilter) {
    push_in(q, "mission_id", filter.mission_ids.iter().map(Uuid::to_string));
    push_in(q, "name", filter.names.iter().cloned());
    push_in(q, "user_id", filter.user_ids.iter().map(Uuid::to_string));
    push_in(q, "mission_type_id", filter.mission_type_ids.iter().map(Uuid::to_string));
    if let Some(archived) = filter.archived {
        q.push(" AND archived = ").push_bind(archived);
    }
}

fn push_in(q: &mut QueryBuilder<Sqlite>, column: &str, values: impl ExactSizeIterator<Item = String>) {
    if values.len() == 0 {
        return;
    }
    q.push(format!(" AND {column} IN ("));
    let mut list = q.separated(", ");
    for v in values {
        list.push_bind(v);
    }
    list.push_unseparated(")");
}

fn mission_from_row(r: &SqliteRow) -> Result<Mission, StoreError> {
    let opt_uuid = |i: usize| -> Result<Option<Uuid>, StoreError> {
        r.try_get::<Option<String>, _>(i)?.as_deref().map(parse_uuid).transpose()
    };
    Ok(Mission {
        mission_id: parse_uuid(&r.try_get::<String, _>(0)?)?,
        user_id: parse_uuid(&r.try_get::<String, _>(1)?)?,
        name: r.try_get(2)?,
        description: r.try_get(3)?,
        mission_type_id: opt_uuid(4)?,
        source_storage_id: opt_uuid(5)?,
        destination_storage_id: opt_uuid(6)?,
        source_path: r.try_get(7)?,
        destination_path: r.try_get(8)?,
        settings: from_json(&r.try_get::<String, _>(9)?)?,
        args: from_json(&r.try_get::<String, _>(10)?)?,
        public: r.try_get(11)?,
        archived: r.try_get(12)?,
        created_at: from_micros(r.try_get(13)?)?,
        updated_at: from_micros(r.try_get(14)?)?,
    })
}

/// The outcome of an insert, with a uniqueness violation turned into [`StoreError::Conflict`]
/// saying `detail`.
fn conflict_on_duplicate<T>(result: Result<T, sqlx::Error>, detail: impl FnOnce() -> String) -> Result<(), StoreError> {
    match result {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(StoreError::Conflict(detail())),
        other => other.map(drop).map_err(Into::into),
    }
}

fn parse_uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|_| StoreError::Corrupt(format!("uuid {s:?}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("maps and lists of strings always serialise")
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("json column: {e}")))
}
