//! The PostgreSQL backend of [`super::Store`]: a pool of connections to a database that several
//! server replicas share.

use std::str::FromStr;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::{DatabaseUrl, Migrations, StoreError};

/// The PostgreSQL schema's migrations: the same versions as SQLite's, in PostgreSQL's dialect.
const MIGRATIONS: &Migrations = &[
    (1, "init", include_str!("../../migrations/postgres/0001_init.sql")),
    (2, "files", include_str!("../../migrations/postgres/0002_files.sql")),
    (3, "cargo_bays", include_str!("../../migrations/postgres/0003_cargo_bays.sql")),
    (4, "stations", include_str!("../../migrations/postgres/0004_stations.sql")),
    (5, "jobs", include_str!("../../migrations/postgres/0005_jobs.sql")),
    (6, "upload_reservations", include_str!("../../migrations/postgres/0006_upload_reservations.sql")),
];

/// Connections a replica holds at most.
const MAX_CONNECTIONS: u32 = 16;

/// A pool of connections to one PostgreSQL database; cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Postgres {
    pool: PgPool,
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
            .connect_with(options)
            .await?;
        let mut conn = pool.acquire().await?;
        super::migrate(&mut *conn, MIGRATIONS).await?;
        drop(conn);
        Ok(Self { pool })
    }

    /// A connection from the pool, for as long as it lives.
    pub(super) async fn connection(&self) -> Result<PoolConnection<sqlx::Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }
}
