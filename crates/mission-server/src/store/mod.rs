//! Persistent state: users, the identity provider's device codes and refresh tokens, missions,
//! mission files and cargo bays.
//!
//! [`Store`] is the one way the rest of the server touches the database. It speaks SQLite today
//! (the embedded default, in `sqlite.rs`); its methods are the seam a PostgreSQL backend will implement
//! with the same conformance tests. Queries are checked at run time (`sqlx::query`), never by the
//! compile-time macros, so one crate can hold both SQL dialects without a live database at build.

mod sqlite;

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

pub use sqlite::Store;

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
    /// A row held a value this version cannot read.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The `--database-url` names an engine this build does not support.
    #[error("unsupported database URL {0:?}: use sqlite://PATH")]
    UnsupportedUrl(String),
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

/// Filters of a mission listing; each given list narrows the result to rows matching one of its
/// values. `visible_to` restricts to the missions a user may read (own or public); `None` is an
/// admin's view.
#[derive(Debug, Clone, Default)]
pub struct MissionFilter {
    /// Only missions this user may read.
    pub visible_to: Option<Uuid>,
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
    /// Bytes all files of the owner's missions hold.
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

/// The current time at the store's precision (microseconds), so a value read back equals the
/// value written.
pub fn now() -> DateTime<Utc> {
    from_micros(to_micros(Utc::now())).expect("the current time is representable")
}

/// Microseconds since the epoch, the store's representation of time.
pub(crate) fn to_micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Inverse of [`to_micros`].
pub(crate) fn from_micros(us: i64) -> Result<DateTime<Utc>, StoreError> {
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
    /// The GPUs it holds there.
    pub gpu_indices: Option<Vec<u32>>,
    /// The program's exit status.
    pub exit_code: Option<i32>,
    /// Why it ended so.
    pub reason: Option<String>,
    /// How limits were enforced.
    pub limits: Option<String>,
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
            gpu_indices: None,
            exit_code: None,
            reason: None,
            limits: None,
        }
    }
}

/// Filters of a job listing; each given list narrows the result to rows matching one of its
/// values. `user` restricts to one user's jobs; `None` is an admin's view.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only this user's jobs.
    pub user: Option<Uuid>,
    /// Missions.
    pub mission_ids: Vec<Uuid>,
    /// Stations.
    pub station_ids: Vec<Uuid>,
    /// Statuses.
    pub statuses: Vec<mission_api::JobStatus>,
    /// Page number from 1.
    pub page: u32,
    /// Page size.
    pub items: u32,
}

/// A landing zone as its agent's token identifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LzIdentity {
    /// The landing zone.
    pub lz_id: Uuid,
    /// Its station.
    pub station_id: Uuid,
    /// Its name.
    pub name: String,
}
