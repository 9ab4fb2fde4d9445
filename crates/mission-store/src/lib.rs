//! Persistent state of the Mission Compute service (`mission-server` is its one user): users, the identity provider's device codes and refresh tokens, the web
//! console's sessions, missions, mission files, cargo bays, stations, landing zones, jobs and the
//! event log.
//!
//! [`Store`] is the one way the rest of the server touches the database. It runs on one of two
//! backends: SQLite (the embedded default, one file under the data dir, `sqlite.rs`) or PostgreSQL
//! (shared by several server replicas, `postgres.rs`). Each operation is written once, in the
//! module of its records (`users`, `missions`, `files`, `cargo_bays`, `stations`, `jobs`,
//! `events`), and
//! compiled for both backends by `with_conn!`; where the dialects differ the operation says so
//! with a `match` on the backend. Queries are checked at run time (`sqlx::query`), never by the
//! compile-time macros, so one crate holds both dialects without a live database at build; rows
//! are read by column name through `row::Columns`. The conformance suite in
//! `tests/store` runs one story through every operation on both backends.

// A job's row, one `json!` of every column, passes the default.
#![recursion_limit = "256"]

pub mod audit;
mod cargo_bays;
mod cluster;
mod events;
mod files;
pub mod fsutil;
mod idempotency;
mod images;
mod jobs;
mod missions;
mod placement;
mod postgres;
mod projects;
mod row;
mod sessions;
mod sqlite;
mod stations;
mod tasks;
#[cfg(feature = "test-support")]
mod test_postgres;
mod url;
mod users;
mod webhooks;

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::QueryBuilder;
use uuid::Uuid;

pub use self::cluster::{ClusterDb, Leadership, MAIL_CHANNEL, PathLock};
pub use self::events::{EventFilter, NewEvent};
pub use self::idempotency::{IdempotencyClaim, KeptAnswer};
pub use self::jobs::{EndingJob, QueuedRow, UsageGrouping, UsageScope, UsedRow};
pub use self::placement::{PlacementAsk, PlacementFacts};
pub use self::projects::{BudgetRecord, LimitsRecord, PERSONAL_MARK, Spent};

/// Id of the station a first start creates (migration 0004), home of the embedded LZ.
pub const DEFAULT_STATION_ID: Uuid = uuid::uuid!("6d697373-696f-4e00-8000-000000000002");
pub use self::url::DatabaseUrl;
pub use self::webhooks::{AttemptOutcome, DueDelivery, NewDelivery, WebhookRecord};

/// Handle to the database; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
    /// The leader epoch this handle's job writes must still hold ([`Store::fenced`]).
    fence: Option<i64>,
    /// The replica this handle works for, recorded with its unfinished file changes
    /// ([`Store::for_replica`]).
    replica: Option<Uuid>,
    /// Woken after every commit that appended events, with the events handed over where the
    /// commit read them back ([`Store::events_appended`], [`Store::take_appended_events`]).
    appended: std::sync::Arc<events::Appended>,
}

/// The database a [`Store`] runs on.
#[derive(Clone, Debug)]
enum Backend {
    Sqlite(sqlite::Sqlite),
    Postgres(postgres::Postgres),
}

/// Runs `$body` with `$conn` bound to a `&mut` connection of the store's backend, compiling it
/// once per backend: `reader` takes one of SQLite's reading connections and `writer` its one
/// writing connection; PostgreSQL takes a pooled connection for either. With `$conn: $db`, `$db`
/// names the backend's `sqlx::Database` type inside `$body` (for a `QueryBuilder`).
macro_rules! with_conn {
    ($store:expr, $role:ident, |$conn:ident| $body:expr) => {
        with_conn!($store, $role, |$conn: _Db| $body)
    };
    ($store:expr, $role:ident, |$conn:ident : $db:ident| $body:expr) => {
        match &$store.backend {
            $crate::Backend::Sqlite(db) => {
                #[allow(dead_code)]
                type $db = sqlx::Sqlite;
                let mut connection = db.$role().await;
                let $conn = &mut *connection;
                $body
            }
            $crate::Backend::Postgres(db) => {
                #[allow(dead_code)]
                type $db = sqlx::Postgres;
                let mut connection = db.connection().await?;
                let $conn = &mut *connection;
                $body
            }
        }
    };
}
pub(crate) use with_conn;

impl Store {
    /// Opens the database at `url` (`sqlite://PATH`, created if missing, or `postgres://…`) and
    /// brings it to this version's schema, refusing a schema newer than this version knows.
    pub async fn open(url: &DatabaseUrl) -> Result<Self, StoreError> {
        let backend = match url.engine() {
            url::Engine::Sqlite => Backend::Sqlite(sqlite::Sqlite::open(url).await?),
            url::Engine::Postgres => Backend::Postgres(postgres::Postgres::open(url).await?),
        };
        Ok(Self { backend, fence: None, replica: None, appended: Default::default() })
    }

    /// The replica this handle works for, if any.
    pub fn replica(&self) -> Option<Uuid> {
        self.replica
    }

    /// This store, working for replica `replica`: the unfinished file changes it begins name the
    /// replica, so that they are settled only once it stopped.
    pub fn for_replica(&self, replica: Uuid) -> Self {
        Self { replica: Some(replica), ..self.clone() }
    }

    /// This store, with every write of jobs ([`Store::save_jobs`]) refused with
    /// [`StoreError::NotLeader`] once the scheduler's leader epoch is no longer `epoch`.
    pub fn fenced(&self, epoch: i64) -> Self {
        Self { fence: Some(epoch), ..self.clone() }
    }

    /// ` FOR UPDATE` on PostgreSQL, where a transaction that reads rows and then changes them
    /// must lock them against concurrent transactions; nothing on SQLite, whose one writing
    /// connection runs one transaction at a time.
    fn for_update(&self) -> &'static str {
        self.dialect("", " FOR UPDATE")
    }

    /// Whether the store is on PostgreSQL.
    fn on_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// The statement of this store's dialect, where the two differ.
    fn dialect<'a>(&self, sqlite: &'a str, postgres: &'a str) -> &'a str {
        match self.backend {
            Backend::Sqlite(_) => sqlite,
            Backend::Postgres(_) => postgres,
        }
    }

    /// How a boolean column is compared with true so the partial indexes on it apply: `1` on
    /// SQLite (whose planner matches a partial index's `WHERE public = 1` literally), `TRUE` on
    /// PostgreSQL.
    fn sql_true(&self) -> &'static str {
        self.dialect("1", "TRUE")
    }

    /// Checks the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        with_conn!(self, reader, |conn| sqlx::query("SELECT 1").execute(conn).await.map(drop))?;
        Ok(())
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule was broken, e.g. a username already taken.
    #[error("{0}")]
    Conflict(String),
    /// The database could not be reached or refused the query.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The database could not be brought to the current schema.
    #[error("database migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
    /// The database was migrated by a newer version of the server.
    #[error(
        "the database's schema is version {found}, newer than this server's {known}: run the newer \
         version (or restore a backup taken before the upgrade)"
    )]
    SchemaTooNew {
        /// The newest migration applied to the database.
        found: i64,
        /// The newest migration this version carries.
        known: i64,
    },
    /// A row held a value this version cannot read.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A write of the scheduler's leader after another replica took over.
    #[error("another replica leads the scheduler now")]
    NotLeader,
}

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// Primary key; the `sub` of tokens the built-in provider signs.
    pub user_id: Uuid,
    /// Login name (built-in) or the external `sub`.
    pub username: String,
    /// PBKDF2 hash of the password, for built-in accounts.
    pub password_hash: Option<String>,
    /// `sub` at the external identity provider.
    pub external_sub: Option<String>,
    /// Whether the user is an administrator.
    pub admin: bool,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl From<UserRecord> for mission_api::User {
    fn from(u: UserRecord) -> Self {
        mission_api::User { user_id: u.user_id, username: u.username, admin: u.admin, created_at: u.created_at }
    }
}

/// State of a device authorization (RFC 8628).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceCodeStatus {
    /// Waiting for the user.
    Pending,
    /// The user approved; tokens not yet issued.
    Approved,
    /// The user said no.
    Denied,
    /// Tokens were issued; the code cannot be used again.
    Consumed,
}

impl DeviceCodeStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Consumed => "consumed",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        Ok(match s {
            "pending" => Self::Pending,
            "approved" => Self::Approved,
            "denied" => Self::Denied,
            "consumed" => Self::Consumed,
            other => return Err(StoreError::Corrupt(format!("device code status {other:?}"))),
        })
    }
}

/// A device authorization, keyed by the hash of its device code.
#[derive(Debug, Clone)]
pub struct DeviceCodeRecord {
    /// sha256 of the device code.
    pub device_code_hash: String,
    /// Code shown to the user, `XXXX-XXXX`.
    pub user_code: String,
    /// Client the code was issued to.
    pub client_id: String,
    /// Scope asked for.
    pub scope: String,
    /// Where the authorization stands.
    pub status: DeviceCodeStatus,
    /// The approving user.
    pub user_id: Option<Uuid>,
    /// Current minimum seconds between polls (grows by 5 on each `slow_down`).
    pub interval_secs: i64,
    /// Time of the previous poll.
    pub last_polled_at: Option<DateTime<Utc>>,
    /// After this the code is `expired_token`.
    pub expires_at: DateTime<Utc>,
}

/// A refresh token's row (the token itself is never stored).
#[derive(Debug, Clone)]
pub struct RefreshTokenRecord {
    /// Owner.
    pub user_id: Uuid,
    /// Client the token was issued to.
    pub client_id: String,
    /// Scope granted.
    pub scope: String,
    /// Expiry.
    pub expires_at: DateTime<Utc>,
    /// Set when revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A signed-in browser of the web console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSessionRecord {
    /// sha256 of the secret in the browser's cookie.
    pub session_hash: String,
    /// Who signed in.
    pub user_id: Uuid,
    /// The token every state-changing request of the session must carry.
    pub csrf_token: String,
    /// When the user signed in.
    pub created_at: DateTime<Utc>,
    /// When the session ends by itself.
    pub expires_at: DateTime<Utc>,
}

/// Filters of a mission listing; each given list narrows the result to rows matching one of its
/// values. `visible_to` restricts to the missions a user may read (own or public); `None` is an
/// admin's view.
#[derive(Debug, Clone, Default)]
pub struct MissionFilter {
    /// Only missions this user may read.
    pub visible_to: Option<Uuid>,
    /// Only missions of these projects.
    pub project_ids: Vec<Uuid>,
    /// Mission ids.
    pub mission_ids: Vec<Uuid>,
    /// Exact names.
    pub names: Vec<String>,
    /// Owners.
    pub user_ids: Vec<Uuid>,
    /// Mission types.
    pub mission_type_ids: Vec<Uuid>,
    /// Archived or not; both when absent.
    pub archived: Option<bool>,
    /// Names containing this text, ignoring case (of ASCII letters only, on SQLite).
    pub name_contains: Option<String>,
    /// Labels the mission has, every one (as [`JobFilter::labels`]).
    pub labels: Vec<(String, String)>,
    /// Page number from 1.
    pub page: u32,
    /// Page size.
    pub items: u32,
}

/// Field changes of a mission update; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct MissionChanges {
    /// New name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New source cargo bay.
    pub source_storage_id: Option<Uuid>,
    /// New destination cargo bay.
    pub destination_storage_id: Option<Uuid>,
    /// New source path.
    pub source_path: Option<String>,
    /// New destination path.
    pub destination_path: Option<String>,
    /// New settings (whole map).
    pub settings: Option<BTreeMap<String, String>>,
    /// New archived flag.
    pub archived: Option<bool>,
    /// New arguments.
    pub args: Option<Vec<String>>,
    /// New labels (whole map, checked by the caller).
    pub labels: Option<mission_api::Labels>,
    /// A new default retry policy (checked by the caller).
    pub retry: Option<mission_api::RetryPolicy>,
    /// The project it moves to (checked by the caller).
    pub project_id: Option<Uuid>,
    /// A new image (`Some(None)`: none).
    pub image: Option<Option<String>>,
}

/// A committed mission file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    /// The mission.
    pub mission_id: Uuid,
    /// Normalised path relative to the mission root.
    pub path: String,
    /// The mission's owner.
    pub user_id: Uuid,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256, hex.
    pub sha256: String,
    /// The object store's e_tag of the object this row describes.
    pub e_tag: Option<String>,
    /// Upload time.
    pub modified_at: DateTime<Utc>,
}

impl From<FileRecord> for mission_api::FileListing {
    fn from(f: FileRecord) -> Self {
        let path = mission_api::paths::MissionPath::parse(&f.path).expect("stored paths are valid");
        mission_api::FileListing {
            filename: path.file_name().to_owned(),
            name: path.file_name().to_owned(),
            path: path.folder().to_owned(),
            file_size: f.size,
            modified_at: f.modified_at,
            sha256: f.sha256,
        }
    }
}

/// A cargo bay row: the bay as the API shows it plus its sealed credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBayRecord {
    /// The bay; `has_credentials` mirrors `sealed_credentials`.
    pub bay: mission_api::CargoBay,
    /// Credentials sealed by the server's cargo-bay key (see `cargo_bays`), if any.
    pub sealed_credentials: Option<Vec<u8>>,
}

/// The counts an upload is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadUsage {
    /// Size of the file being replaced, if the path exists.
    pub existing_size: Option<u64>,
    /// Files the mission holds.
    pub mission_files: u64,
    /// Bytes all files of the owner's missions and the owner's image archives hold.
    pub user_bytes: u64,
}

/// What an unfinished change to a mission file was doing when the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentKind {
    /// Writing a new version of the object.
    Upload,
    /// Removing the file.
    Delete,
}

/// An intent row: a change of `path` in `mission_id` that has not been committed yet.
#[derive(Debug, Clone)]
pub struct Intent {
    /// Id of the change.
    pub intent_id: Uuid,
    /// What the change does.
    pub kind: IntentKind,
    /// The mission.
    pub mission_id: Uuid,
    /// The file.
    pub path: String,
}

impl Intent {
    /// A new change of `path` in `mission_id`.
    pub fn new(kind: IntentKind, mission_id: Uuid, path: &str) -> Self {
        Self { intent_id: Uuid::new_v4(), kind, mission_id, path: path.to_owned() }
    }
}

/// The migrations of one backend, embedded so the binary carries its schema: (version, name, SQL).
type Migrations = [(i64, &'static str, &'static str)];

#[cfg(test)]
mod migration_tests {
    /// Migration 26 gives every existing user their personal project and moves their missions
    /// and jobs into it.
    #[tokio::test]
    async fn projects_arrive_with_every_user_holding_their_missions_and_jobs() {
        use sqlx::{Connection, Row};
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        let (before, projects) = super::sqlite::MIGRATIONS.split_at(25);
        assert_eq!(projects[0].1, "projects");
        super::sqlite::migrate(&mut conn, before).await.unwrap();
        let station = super::DEFAULT_STATION_ID.to_string();
        for statement in [
            "INSERT INTO users (user_id, username, created_at) VALUES ('u1', 'ada', 5), ('u2', 'bob', 6)".to_owned(),
            "INSERT INTO missions (mission_id, user_id, name, description, settings, args, public, archived, \
             created_at, updated_at) VALUES ('m1', 'u1', 'm', '', '{}', '[]', 0, 0, 1, 1)"
                .to_owned(),
            format!(
                "INSERT INTO jobs (job_id, seq, mission_id, user_id, station_id, status, cpu_count, memory_amount, \
                 gpu_count, command, created_at) VALUES ('j1', 1, 'm1', 'u1', '{station}', 'queued', 1, 1, 0, '[]', 1)"
            ),
        ] {
            sqlx::query(&statement).execute(&mut conn).await.unwrap();
        }
        super::sqlite::migrate(&mut conn, super::sqlite::MIGRATIONS).await.unwrap();
        let rows = sqlx::query(
            "SELECT p.project_id, p.name, p.personal_of, p.created_at, m.user_id, m.role FROM projects p \
             JOIN project_members m USING (project_id) ORDER BY p.name",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let projects: Vec<(String, String, String, i64, String, String)> =
            rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5))).collect();
        let personal = |id: &str, name: &str, at| {
            (id.to_owned(), name.to_owned(), id.to_owned(), at, id.to_owned(), "manager".to_owned())
        };
        assert_eq!(projects, [personal("u1", "~ada", 5), personal("u2", "~bob", 6)]);
        let mission: String = sqlx::query_scalar("SELECT project_id FROM missions").fetch_one(&mut conn).await.unwrap();
        let job: String = sqlx::query_scalar("SELECT project_id FROM jobs").fetch_one(&mut conn).await.unwrap();
        assert_eq!((mission.as_str(), job.as_str()), ("u1", "u1"));
    }

    /// Each backend's list names exactly the files of its `migrations/` folder, `NNNN_name.sql`
    /// as version NNNN and name `name`, with the file's text: a migration added to the folder
    /// but not to the list (or the reverse) fails here, not on a user's database.
    #[test]
    fn each_backend_lists_exactly_its_migrations_folder() {
        for (backend, list) in [("sqlite", super::sqlite::MIGRATIONS), ("postgres", super::postgres::MIGRATIONS)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations").join(backend);
            let mut files: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| {
                    let path = entry.unwrap().path();
                    let file = path.file_name().unwrap().to_str().unwrap().to_owned();
                    let stem = file.strip_suffix(".sql").unwrap_or_else(|| panic!("{file} is not an .sql file"));
                    let (version, name) = stem.split_once('_').unwrap();
                    (version.parse().unwrap(), name.to_owned(), std::fs::read_to_string(&path).unwrap())
                })
                .collect();
            files.sort();
            let listed: Vec<(i64, String, String)> =
                list.iter().map(|(v, name, sql)| (*v, (*name).to_owned(), (*sql).to_owned())).collect();
            assert_eq!(listed, files, "{backend}'s migration list and {} differ", dir.display());
        }
    }
}

/// Brings the database behind `conn` to the schema of `migrations`, holding the database's
/// migration lock (on PostgreSQL an advisory lock, so replicas started together migrate once;
/// SQLite's single writer needs none) while it refuses a schema newer than the newest of them
/// and applies those not yet applied; answers how many it applied.
async fn migrate<C: sqlx::migrate::Migrate>(conn: &mut C, migrations: &Migrations) -> Result<usize, StoreError> {
    conn.lock().await?;
    let outcome = migrate_locked(conn, migrations).await;
    conn.unlock().await?;
    outcome
}

async fn migrate_locked<C: sqlx::migrate::Migrate>(conn: &mut C, migrations: &Migrations) -> Result<usize, StoreError> {
    use std::borrow::Cow;

    use sqlx::migrate::{Migration, MigrationType, Migrator};

    let known = migrations.iter().map(|m| m.0).max().unwrap_or(0);
    conn.ensure_migrations_table().await?;
    let applied = conn.list_applied_migrations().await?;
    if let Some(found) = applied.iter().map(|m| m.version).max().filter(|&found| found > known) {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    let migrator = Migrator {
        migrations: Cow::Owned(
            migrations
                .iter()
                .map(|(version, name, sql)| {
                    Migration::new(*version, Cow::Borrowed(name), MigrationType::Simple, Cow::Borrowed(sql), false)
                })
                .collect(),
        ),
        locking: false,
        ..Migrator::DEFAULT
    };
    migrator.run_direct(conn).await?;
    let pending = migrations.iter().filter(|(version, ..)| !applied.iter().any(|m| m.version == *version));
    Ok(pending.count())
}

/// The outcome of an insert, with a uniqueness violation turned into [`StoreError::Conflict`]
/// saying `detail`.
fn conflict_on_duplicate<T>(result: Result<T, sqlx::Error>, detail: impl FnOnce() -> String) -> Result<(), StoreError> {
    match result {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Err(StoreError::Conflict(detail())),
        other => other.map(drop).map_err(Into::into),
    }
}

/// A value as the JSON text a column keeps it in.
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("maps and lists of strings always serialise")
}

/// ` AND` one condition per label: the row's `labels` (a JSON object, as text) has `key` set to
/// `value`. Keys are checked label keys: no quotes, so one in a JSON path stays a single key.
fn push_labels<'q, DB>(q: &mut QueryBuilder<'q, DB>, labels: &[(String, String)])
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let postgres = DB::NAME == <sqlx::Postgres as sqlx::Database>::NAME;
    for (key, value) in labels {
        if postgres {
            q.push(" AND (labels::jsonb ->> ").push_bind(key.clone());
        } else {
            q.push(" AND (labels ->> ").push_bind(format!("$.\"{key}\""));
        }
        q.push(") = ").push_bind(value.clone());
    }
}

/// Appends ` AND {column} IN (…)` for `values`, or nothing when there are none.
fn push_any_of<'q, DB>(q: &mut QueryBuilder<'q, DB>, column: &str, values: impl ExactSizeIterator<Item = String>)
where
    DB: sqlx::Database,
    String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
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

/// The current time at the store's precision (microseconds), so a value read back equals the
/// value written.
pub fn now() -> DateTime<Utc> {
    from_micros(to_micros(Utc::now())).expect("the current time is representable")
}

/// Microseconds since the epoch, the store's representation of time.
pub fn to_micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Inverse of [`to_micros`].
pub fn from_micros(us: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_micros(us).single().ok_or_else(|| StoreError::Corrupt(format!("timestamp {us}")))
}

/// One move of a job, written with its history row in one transaction. Fields left `None` keep
/// their value.
#[derive(Debug, Clone)]
pub struct JobUpdate {
    /// The job.
    pub job_id: Uuid,
    /// The status entered.
    pub status: mission_api::JobStatus,
    /// When.
    pub at: DateTime<Utc>,
    /// The history row's detail.
    pub detail: Option<String>,
    /// The landing zone it is placed on (`Some(None)` clears it, on a re-queue).
    pub lz_id: Option<Option<Uuid>>,
    /// A gang's landing zones, in rank order (empty on a re-queue).
    pub node_lz_ids: Option<Vec<Uuid>>,
    /// The GPUs it holds there.
    pub gpu_indices: Option<Vec<u32>>,
    /// The program's exit status.
    pub exit_code: Option<i32>,
    /// Why it ended so, or why it waits; a job that starts running without one has none left.
    pub reason: Option<String>,
    /// How limits were enforced.
    pub limits: Option<String>,
    /// What it used (as it ends).
    pub usage: Option<mission_api::JobUsage>,
    /// Why it still waits, as it moves to a status other than `queued` (a batch system's
    /// queue); without one such a move clears the reason.
    pub pending: Option<mission_api::PendingReason>,
    /// The attempt it is on now (a retry).
    pub attempt: Option<u32>,
    /// The memory it asks for now, in megabytes (a retry after running out of memory).
    pub memory_amount: Option<u64>,
}

impl JobUpdate {
    /// A move to `status` now, changing nothing else.
    pub fn new(job_id: Uuid, status: mission_api::JobStatus) -> Self {
        Self {
            job_id,
            status,
            at: now(),
            detail: None,
            lz_id: None,
            node_lz_ids: None,
            gpu_indices: None,
            exit_code: None,
            reason: None,
            limits: None,
            usage: None,
            pending: None,
            attempt: None,
            memory_amount: None,
        }
    }
}

/// Filters of a job listing; each given list narrows the result to rows matching one of its
/// values. `user` restricts to one user's jobs; `None` is an admin's view.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this user's jobs.
    pub user: Option<Uuid>,
    /// Only jobs charged to these projects.
    pub project_ids: Vec<Uuid>,
    /// Missions.
    pub mission_ids: Vec<Uuid>,
    /// Stations.
    pub station_ids: Vec<Uuid>,
    /// Statuses.
    pub statuses: Vec<mission_api::JobStatus>,
    /// Job arrays the jobs are elements of.
    pub array_ids: Vec<Uuid>,
    /// Labels the job has, every one (`key`, `value`; keys checked by
    /// [`mission_api::labels::check_label_key`]).
    pub labels: Vec<(String, String)>,
    /// Only jobs that run GA4GH TES tasks.
    pub tasks_only: bool,
    /// Only jobs submitted no later than the job with this sequence number: where a page starts
    /// when the caller knows it (the scheduler finds it in its queue without a walk), so that
    /// reading a deep page does not skip row after row.
    pub seq_at_most: Option<u64>,
    /// Page number from 1.
    pub page: u32,
    /// Page size.
    pub items: u32,
}

/// A landing zone as its agent's token identifies it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LzIdentity {
    /// The landing zone.
    pub lz_id: Uuid,
    /// Its station.
    pub station_id: Uuid,
    /// Its name.
    pub name: String,
    /// The cluster account it was registered with, for a batch-system gateway.
    pub cluster_account: Option<String>,
}

/// What tests build stores from (the `test-support` feature): a SQLite store with a user, a
/// mission, and a fresh database on the PostgreSQL test server.
#[cfg(feature = "test-support")]
pub mod test_support {
    use super::{DatabaseUrl, Store, UserRecord, now};
    use uuid::Uuid;

    pub use super::test_postgres::PostgresDatabase;

    /// A store on a new SQLite database in `dir`, with one user, `ada`.
    pub async fn store_with_user(dir: &std::path::Path) -> (Store, UserRecord) {
        let store = Store::open(&DatabaseUrl::sqlite(&dir.join("mission.db"))).await.unwrap();
        let user = add_user(&store, "ada").await;
        (store, user)
    }

    /// Adds an ordinary user named `username`, without a password.
    pub async fn add_user(store: &Store, username: &str) -> UserRecord {
        let user = UserRecord {
            user_id: Uuid::new_v4(),
            username: username.into(),
            password_hash: None,
            external_sub: None,
            admin: false,
            created_at: now(),
        };
        store.insert_user(&user).await.unwrap();
        user
    }

    /// A mission of `user_id` named `name` with nothing else set, created now.
    pub fn mission(user_id: Uuid, name: &str) -> mission_api::Mission {
        let at = now();
        mission_api::Mission {
            mission_id: Uuid::new_v4(),
            name: name.into(),
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
            labels: Default::default(),
            retry: None,
            image: None,
            user_id,
            project_id: user_id,
            created_at: at,
            updated_at: at,
        }
    }
}
