//! The SQLite backend of [`super::Store`]: one file under the data dir, WAL mode, a few reading
//! connections and one writing.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

use super::{DatabaseUrl, Migrations, StoreError};

/// The start of a statement over the elements of a JSON array parameter: `WITH ALIAS(key, value)`,
/// a table of the array's elements, each once as JSONB. A statement that reads the fields of
/// `json_each`'s own `value` has SQLite turn the element back into text for every field it reads
/// (35 for a job row: 80 µs a job for the insert of 5,000, on SQLite 3.51); read from this table,
/// each element is converted once and every `->>` looks straight into its JSONB (15–22 µs a job).
macro_rules! sqlite_rows {
    ($alias:literal, $parameter:literal) => {
        concat!(
            "WITH ",
            $alias,
            "(key, value) AS MATERIALIZED (SELECT key, jsonb(value) FROM json_each(",
            $parameter,
            ")) "
        )
    };
}
pub(crate) use sqlite_rows;

/// The SQLite schema's migrations.
pub(super) const MIGRATIONS: &Migrations = &[
    (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
    (2, "files", include_str!("../migrations/sqlite/0002_files.sql")),
    (3, "cargo_bays", include_str!("../migrations/sqlite/0003_cargo_bays.sql")),
    (4, "stations", include_str!("../migrations/sqlite/0004_stations.sql")),
    (5, "jobs", include_str!("../migrations/sqlite/0005_jobs.sql")),
    (6, "upload_reservations", include_str!("../migrations/sqlite/0006_upload_reservations.sql")),
    (7, "cluster", include_str!("../migrations/sqlite/0007_cluster.sql")),
    (8, "replica_liveness", include_str!("../migrations/sqlite/0008_replica_liveness.sql")),
    (9, "job_log_chunks", include_str!("../migrations/sqlite/0009_job_log_chunks.sql")),
    (10, "sign_in_brakes", include_str!("../migrations/sqlite/0010_sign_in_brakes.sql")),
    (11, "job_time_limit", include_str!("../migrations/sqlite/0011_job_time_limit.sql")),
    (12, "lz_cluster_account", include_str!("../migrations/sqlite/0012_lz_cluster_account.sql")),
    (13, "console_sessions", include_str!("../migrations/sqlite/0013_console_sessions.sql")),
    (14, "job_labels", include_str!("../migrations/sqlite/0014_job_labels.sql")),
    (15, "mission_labels", include_str!("../migrations/sqlite/0015_mission_labels.sql")),
    (16, "events", include_str!("../migrations/sqlite/0016_events.sql")),
    (17, "webhooks", include_str!("../migrations/sqlite/0017_webhooks.sql")),
    (18, "job_log_cap", include_str!("../migrations/sqlite/0018_job_log_cap.sql")),
    (19, "job_usage", include_str!("../migrations/sqlite/0019_job_usage.sql")),
    (20, "job_dependencies", include_str!("../migrations/sqlite/0020_job_dependencies.sql")),
    (21, "job_retries", include_str!("../migrations/sqlite/0021_job_retries.sql")),
    (22, "job_arrays", include_str!("../migrations/sqlite/0022_job_arrays.sql")),
    (23, "queue_positions", include_str!("../migrations/sqlite/0023_queue_positions.sql")),
    (24, "list_indexes", include_str!("../migrations/sqlite/0024_list_indexes.sql")),
    (25, "job_array_counts", include_str!("../migrations/sqlite/0025_job_array_counts.sql")),
    (26, "projects", include_str!("../migrations/sqlite/0026_projects.sql")),
    (27, "project_limits", include_str!("../migrations/sqlite/0027_project_limits.sql")),
    (28, "project_budgets", include_str!("../migrations/sqlite/0028_project_budgets.sql")),
    (29, "claimed_memberships", include_str!("../migrations/sqlite/0029_claimed_memberships.sql")),
    (30, "reclaim", include_str!("../migrations/sqlite/0030_reclaim.sql")),
    (31, "audit", include_str!("../migrations/sqlite/0031_audit.sql")),
    (32, "images", include_str!("../migrations/sqlite/0032_images.sql")),
    (33, "idempotency", include_str!("../migrations/sqlite/0033_idempotency.sql")),
    (34, "sessions", include_str!("../migrations/sqlite/0034_sessions.sql")),
    (35, "jobs_outlive_hosts", include_str!("../migrations/sqlite/0035_jobs_outlive_hosts.sql")),
    (36, "job_numbers", include_str!("../migrations/sqlite/0036_job_numbers.sql")),
    (37, "tes_tasks", include_str!("../migrations/sqlite/0037_tes_tasks.sql")),
    (38, "gangs", include_str!("../migrations/sqlite/0038_gangs.sql")),
    (39, "warnings_and_requeue", include_str!("../migrations/sqlite/0039_warnings_and_requeue.sql")),
    (40, "events_pruned_by_number", include_str!("../migrations/sqlite/0040_events_pruned_by_number.sql")),
    (41, "energy", include_str!("../migrations/sqlite/0041_energy.sql")),
    (42, "energy_parts", include_str!("../migrations/sqlite/0042_energy_parts.sql")),
    (43, "grid_problem", include_str!("../migrations/sqlite/0043_grid_problem.sql")),
];

/// The connections to one SQLite database; cheap to clone.
///
/// Reads go through a few connections; every write goes through `writer`, one connection,
/// because SQLite admits one writer at a time and writers racing for its lock back off by
/// sleeping (milliseconds each), while waiting for our own connection costs nothing.
/// Connections are held behind locks rather than in an sqlx pool: the pool pings a connection on
/// every release, one more round trip to the connection's worker thread per query (and the next
/// query on that connection waits behind it).
#[derive(Clone, Debug)]
pub(super) struct Sqlite {
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

/// Brings the database behind `conn` to the schema of `migrations` with its foreign keys off,
/// as SQLite's own procedure for changing a table's schema asks: a migration that rebuilds a table
/// (the only way SQLite changes a constraint) drops the old one, which with foreign keys on would
/// delete every row that refers to it. Foreign keys come back on once every reference is checked
/// (where a migration ran: the check reads every table that refers to another).
pub(super) async fn migrate(conn: &mut SqliteConnection, migrations: &Migrations) -> Result<(), StoreError> {
    sqlx::query("PRAGMA foreign_keys = OFF").execute(&mut *conn).await?;
    let migrated = super::migrate(conn, migrations).await;
    let dangling: Vec<(String, Option<i64>, String)> = match migrated {
        Ok(applied) if applied > 0 => sqlx::query_as("PRAGMA foreign_key_check").fetch_all(&mut *conn).await?,
        _ => Vec::new(),
    };
    sqlx::query("PRAGMA foreign_keys = ON").execute(&mut *conn).await?;
    migrated?;
    match dangling.first() {
        Some((table, row, parent)) => Err(StoreError::Corrupt(format!(
            "after migrating, {} rows refer to rows that do not exist (the first: row {} of {table}, to {parent})",
            dangling.len(),
            row.map_or_else(|| "?".to_owned(), |r| r.to_string()),
        ))),
        None => Ok(()),
    }
}

impl Sqlite {
    /// Opens (creating if needed) the database at `url` (`sqlite://PATH`) and migrates it.
    pub(super) async fn open(url: &DatabaseUrl) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url.expose())?
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
        migrate(&mut writer, MIGRATIONS).await?;
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
    pub(super) async fn reader(&self) -> tokio::sync::MutexGuard<'_, SqliteConnection> {
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
    pub(super) async fn writer(&self) -> tokio::sync::MutexGuard<'_, SqliteConnection> {
        self.writer.lock().await
    }
}

/// Runs `script`, statements that begin and commit their own transaction, in one turn of the
/// writer `conn`, answering the rows its statements return (`RETURNING`); should a statement
/// fail, the script stops inside its transaction, which is rolled back here so the writer is left
/// clean.
pub(super) async fn run_script<'q>(
    conn: &mut SqliteConnection,
    script: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
) -> Result<Vec<sqlx::sqlite::SqliteRow>, StoreError> {
    let written = script.fetch_all(&mut *conn).await;
    if written.is_err() {
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    Ok(written?)
}
