//! The PostgreSQL backend of [`super::Store`]: a pool of connections to a database that several
//! server replicas share.

use std::str::FromStr;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::{DatabaseUrl, Migrations, StoreError};

/// The PostgreSQL schema's migrations: the same versions as SQLite's, in PostgreSQL's dialect.
pub(super) const MIGRATIONS: &Migrations = &[
    (1, "init", include_str!("../migrations/postgres/0001_init.sql")),
    (2, "files", include_str!("../migrations/postgres/0002_files.sql")),
    (3, "cargo_bays", include_str!("../migrations/postgres/0003_cargo_bays.sql")),
    (4, "stations", include_str!("../migrations/postgres/0004_stations.sql")),
    (5, "jobs", include_str!("../migrations/postgres/0005_jobs.sql")),
    (6, "upload_reservations", include_str!("../migrations/postgres/0006_upload_reservations.sql")),
    (7, "cluster", include_str!("../migrations/postgres/0007_cluster.sql")),
    (8, "replica_liveness", include_str!("../migrations/postgres/0008_replica_liveness.sql")),
    (9, "job_log_chunks", include_str!("../migrations/postgres/0009_job_log_chunks.sql")),
    (10, "sign_in_brakes", include_str!("../migrations/postgres/0010_sign_in_brakes.sql")),
    (11, "job_time_limit", include_str!("../migrations/postgres/0011_job_time_limit.sql")),
    (12, "lz_cluster_account", include_str!("../migrations/postgres/0012_lz_cluster_account.sql")),
    (13, "console_sessions", include_str!("../migrations/postgres/0013_console_sessions.sql")),
    (14, "job_labels", include_str!("../migrations/postgres/0014_job_labels.sql")),
    (15, "mission_labels", include_str!("../migrations/postgres/0015_mission_labels.sql")),
    (16, "events", include_str!("../migrations/postgres/0016_events.sql")),
    (17, "webhooks", include_str!("../migrations/postgres/0017_webhooks.sql")),
    (18, "job_log_cap", include_str!("../migrations/postgres/0018_job_log_cap.sql")),
    (19, "job_usage", include_str!("../migrations/postgres/0019_job_usage.sql")),
    (20, "job_dependencies", include_str!("../migrations/postgres/0020_job_dependencies.sql")),
    (21, "job_retries", include_str!("../migrations/postgres/0021_job_retries.sql")),
    (22, "job_arrays", include_str!("../migrations/postgres/0022_job_arrays.sql")),
    (23, "queue_positions", include_str!("../migrations/postgres/0023_queue_positions.sql")),
    (24, "list_indexes", include_str!("../migrations/postgres/0024_list_indexes.sql")),
    (25, "job_array_counts", include_str!("../migrations/postgres/0025_job_array_counts.sql")),
    (26, "projects", include_str!("../migrations/postgres/0026_projects.sql")),
    (27, "project_limits", include_str!("../migrations/postgres/0027_project_limits.sql")),
    (28, "project_budgets", include_str!("../migrations/postgres/0028_project_budgets.sql")),
    (29, "claimed_memberships", include_str!("../migrations/postgres/0029_claimed_memberships.sql")),
    (30, "reclaim", include_str!("../migrations/postgres/0030_reclaim.sql")),
    (31, "audit", include_str!("../migrations/postgres/0031_audit.sql")),
    (32, "images", include_str!("../migrations/postgres/0032_images.sql")),
    (33, "idempotency", include_str!("../migrations/postgres/0033_idempotency.sql")),
    (34, "sessions", include_str!("../migrations/postgres/0034_sessions.sql")),
    (35, "jobs_outlive_hosts", include_str!("../migrations/postgres/0035_jobs_outlive_hosts.sql")),
    (36, "job_numbers", include_str!("../migrations/postgres/0036_job_numbers.sql")),
    (37, "tes_tasks", include_str!("../migrations/postgres/0037_tes_tasks.sql")),
    (38, "gangs", include_str!("../migrations/postgres/0038_gangs.sql")),
    (39, "warnings_and_requeue", include_str!("../migrations/postgres/0039_warnings_and_requeue.sql")),
    (40, "events_pruned_by_number", include_str!("../migrations/postgres/0040_events_pruned_by_number.sql")),
    (41, "energy", include_str!("../migrations/postgres/0041_energy.sql")),
    (42, "energy_parts", include_str!("../migrations/postgres/0042_energy_parts.sql")),
    (43, "grid_problem", include_str!("../migrations/postgres/0043_grid_problem.sql")),
];

/// Connections a replica holds at most.
const MAX_CONNECTIONS: u32 = 16;

/// A pool of connections to one PostgreSQL database; cheap to clone. Its `Debug` leaves the
/// connect options out: they hold the password.
#[derive(Clone)]
pub(super) struct Postgres {
    pool: PgPool,
    options: std::sync::Arc<PgConnectOptions>,
}

impl Postgres {
    /// Connects to the database at `url` and migrates it.
    pub(super) async fn open(url: &DatabaseUrl) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url.expose())?.application_name("mission-server");
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(Duration::from_secs(10))
            // A connection that broke shows as a failed query, which the caller sees; checking
            // each one before use would add a round trip to every query.
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        let mut conn = pool.acquire().await?;
        super::migrate(&mut *conn, MIGRATIONS).await?;
        drop(conn);
        Ok(Self { pool, options: std::sync::Arc::new(options) })
    }

    /// The pool, for the cluster's queries.
    pub(super) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How to open connections of its own (the leader's lock, listeners).
    pub(super) fn options(&self) -> &std::sync::Arc<PgConnectOptions> {
        &self.options
    }

    /// A connection from the pool, for as long as it lives.
    pub(super) async fn connection(&self) -> Result<PoolConnection<sqlx::Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres").field("pool_size", &self.pool.size()).finish_non_exhaustive()
    }
}
