//! A database of its own for each test on the PostgreSQL test server
//! (`scripts/postgres-test-server.sh`): the server whose URL `MISSION_TEST_POSTGRES_URL` gives
//! (`scripts/test.sh` starts one for the whole suite), or else the one the script starts or finds
//! running in its default directory.

use std::time::Duration;

use crate::DatabaseUrl;
use sqlx::Connection;

/// A fresh, empty database on the test server. It stays after the test (the test server's
/// cluster is temporary as a whole).
pub struct PostgresDatabase {
    /// `postgres://mission:…@127.0.0.1:PORT/mission_test_…`.
    pub url: DatabaseUrl,
}

impl PostgresDatabase {
    /// Creates the database, or returns `None` (saying why) where PostgreSQL is not installed —
    /// unless `MISSION_REQUIRE_POSTGRES=1` (set by `scripts/test.sh`, which installs it) makes
    /// that a failure.
    pub async fn create() -> Option<Self> {
        let server = match std::env::var("MISSION_TEST_POSTGRES_URL") {
            Ok(url) => url,
            Err(_) => Self::start_server().await?,
        };
        let mut admin = tokio::time::timeout(Duration::from_secs(30), sqlx::PgConnection::connect(&server))
            .await
            .expect("the PostgreSQL test server did not answer within 30 s")
            .expect("connect to the PostgreSQL test server");
        let name = format!("mission_test_{}", uuid::Uuid::new_v4().simple());
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create a test database");
        let (base, _) = server.rsplit_once('/').expect("the server URL names a database");
        Some(Self { url: format!("{base}/{name}").parse().expect("a PostgreSQL URL") })
    }

    /// The CA certificate that signed the test server's (`MISSION_TEST_POSTGRES_CA`, which
    /// `scripts/test.sh` sets, or else the one of the script's default directory).
    pub async fn ca_file() -> std::path::PathBuf {
        if let Some(path) = std::env::var_os("MISSION_TEST_POSTGRES_CA") {
            return path.into();
        }
        let out =
            tokio::process::Command::new("bash").arg(Self::script()).arg("ca").output().await.expect("run the script");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).expect("a path").trim().into()
    }

    fn script() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/postgres-test-server.sh")
    }

    async fn start_server() -> Option<String> {
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            tokio::process::Command::new("bash").arg(Self::script()).arg("start").output(),
        )
        .await
        .expect("scripts/postgres-test-server.sh did not finish within 120 s")
        .expect("run scripts/postgres-test-server.sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(3) {
            assert!(
                std::env::var("MISSION_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "PostgreSQL is required (MISSION_REQUIRE_POSTGRES=1) but missing: {stderr}"
            );
            eprintln!("skipped: {stderr}");
            return None;
        }
        assert!(out.status.success(), "scripts/postgres-test-server.sh failed: {stderr}");
        let stdout = String::from_utf8(out.stdout).expect("the script prints a URL");
        Some(stdout.trim().to_owned())
    }
}
