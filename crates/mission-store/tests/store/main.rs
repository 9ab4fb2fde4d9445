//! The store's conformance suite: one story through every [`Store`] operation, told in chapters,
//! each run on SQLite and on PostgreSQL (a fresh database on the PostgreSQL test server, see
//! `mission_store::test_support::PostgresDatabase`). A backend conforms when every chapter passes on it.

mod story;

use mission_store::Store;
use mission_store::{DatabaseUrl, StoreError};

/// A store on a new SQLite database, with the temporary dir that holds it.
async fn sqlite() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&DatabaseUrl::sqlite(&dir.path().join("mission.db"))).await.unwrap();
    (store, dir)
}

/// A store on a new PostgreSQL database, or `None` where PostgreSQL is missing (and allowed to be).
async fn postgres() -> Option<Store> {
    let database = mission_store::test_support::PostgresDatabase::create().await?;
    Some(Store::open(&database.url).await.unwrap())
}

/// One test per chapter and backend.
macro_rules! chapters {
    ($($chapter:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $chapter() {
                    let (store, _dir) = super::sqlite().await;
                    super::story::$chapter(&store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $chapter() {
                    let Some(store) = super::postgres().await else { return };
                    super::story::$chapter(&store).await;
                }
            )*
        }
    };
}

chapters!(
    users_and_sign_in,
    missions_with_every_filter,
    files_intents_and_usage,
    parallel_uploads_share_one_quota,
    cargo_bays,
    stations_members_and_landing_zones,
    job_batches_and_history,
    jobs_outlive_their_hosts_and_mission,
    images_count_against_their_owners_bytes,
    array_progress_follows_every_write,
    a_failing_batch_leaves_nothing_written,
    job_listings_results_and_agents,
    the_event_log_in_commit_order,
    webhooks_route_claim_and_deliver,
    projects_and_members,
    the_audit_trail,
    idempotency_keys,
    placement_facts_for_a_batch,
);

/// Makes the database at `url` look migrated by a newer version (a migration this one does not
/// know) and checks that opening it is refused, saying so.
async fn refuses_a_newer_schema<C: sqlx::Connection>(url: &DatabaseUrl)
where
    for<'c> &'c mut C: sqlx::Executor<'c, Database = C::Database>,
    for<'q> bool: sqlx::Encode<'q, C::Database> + sqlx::Type<C::Database>,
    for<'q> Vec<u8>: sqlx::Encode<'q, C::Database> + sqlx::Type<C::Database>,
    for<'q> <C::Database as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, C::Database>,
{
    Store::open(url).await.unwrap();
    let mut conn = C::connect(url.expose()).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999, 'from the future', $1, $2, 0)",
    )
    .bind(true)
    .bind(vec![0u8; 48])
    .execute(&mut conn)
    .await
    .unwrap();
    match Store::open(url).await {
        Err(err @ StoreError::SchemaTooNew { found: 999, known }) => {
            assert!(known >= 6, "{known}");
            assert!(err.to_string().contains("newer than this server's"), "{err}");
        }
        other => panic!("a schema newer than this version must be refused, got {other:?}"),
    }
}

#[tokio::test]
async fn sqlite_refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    refuses_a_newer_schema::<sqlx::SqliteConnection>(&DatabaseUrl::sqlite(&dir.path().join("mission.db"))).await;
}

#[tokio::test]
async fn postgres_refuses_a_newer_schema() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    refuses_a_newer_schema::<sqlx::PgConnection>(&database.url).await;
}

/// Replicas started together on one database migrate it once, under the database's lock.
#[tokio::test]
async fn postgres_replicas_starting_together_migrate_once() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    let opened = futures_util::future::join_all((0..4).map(|_| Store::open(&database.url))).await;
    for store in opened {
        store.expect("every replica opens the database").ping().await.unwrap();
    }
}

/// An unreachable or refusing database's error never shows the URL's password.
#[tokio::test]
async fn a_database_password_shows_in_no_error() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    let store = Store::open(&database.url).await.unwrap();
    let shown = format!("{} {:?} {store:?} {:?}", database.url, database.url, store.cluster());
    let real = database.url.expose();
    let password = real.split(':').nth(2).unwrap().split('@').next().unwrap().to_owned();
    assert!(!shown.contains(&password), "{shown}");
    let wrong: DatabaseUrl = real.replace(&password, "wrong-password-123").parse().unwrap();
    let err = Store::open(&wrong).await.unwrap_err();
    let message = format!("{err} {err:?}");
    assert!(!message.contains("wrong-password-123") && !message.contains(&password), "{message}");
}

/// Only the replica that leads may write jobs: a store fenced with an epoch that another replica
/// has since taken over refuses the write, and writes nothing.
#[tokio::test]
async fn postgres_a_deposed_leader_writes_no_job() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    let store = Store::open(&database.url).await.unwrap();
    let cluster = store.cluster().expect("a PostgreSQL store has cluster tables");
    let (mission, _) = story::mission_with_lz(&store).await;
    let first = cluster.lead(uuid::Uuid::new_v4()).await.unwrap();
    let first_epoch = first.epoch;
    let old = store.fenced(first_epoch);
    let job = story::job(&mission, story::LOCAL_STATION);
    old.save_jobs(&story::numbered(&store, std::slice::from_ref(&job)).await, &[], &[]).await.unwrap();
    drop(first);
    let second = cluster.lead(uuid::Uuid::new_v4()).await.unwrap();
    assert_eq!(second.epoch, first_epoch + 1, "a new lead is a new epoch");
    let late = story::job(&mission, story::LOCAL_STATION);
    assert!(matches!(
        old.save_jobs(&story::numbered(&store, std::slice::from_ref(&late)).await, &[], &[]).await,
        Err(StoreError::NotLeader)
    ));
    assert!(store.job(late.job_id).await.unwrap().is_none());
    store
        .fenced(second.epoch)
        .save_jobs(&story::numbered(&store, std::slice::from_ref(&late)).await, &[], &[])
        .await
        .unwrap();
    assert!(store.job(late.job_id).await.unwrap().is_some());
}

/// SQLite serves one process: no cluster.
#[tokio::test]
async fn sqlite_has_no_cluster() {
    let (store, _dir) = sqlite().await;
    assert!(store.cluster().is_none());
}

/// Replicas keep jobs' output in the database, chunk by chunk.
#[tokio::test]
async fn postgres_keeps_job_logs_in_chunks() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    let store = Store::open(&database.url).await.unwrap();
    let db = store.cluster().unwrap();
    let (mission, _) = story::mission_with_lz(&store).await;
    let job = story::job(&mission, story::LOCAL_STATION);
    store.save_jobs(&story::numbered(&store, std::slice::from_ref(&job)).await, &[], &[]).await.unwrap();
    assert_eq!(db.log_state(job.job_id, "stdout").await.unwrap(), (0, None));
    db.append_log(job.job_id, "stdout", 0, b"hello ").await.unwrap();
    db.append_log(job.job_id, "stdout", 6, b"world\n").await.unwrap();
    db.append_log(job.job_id, "stderr", 0, b"oops\n").await.unwrap();
    assert!(matches!(db.append_log(job.job_id, "stdout", 6, b"again").await, Err(StoreError::Conflict(_))));
    assert_eq!(db.log_state(job.job_id, "stdout").await.unwrap(), (12, None));
    assert_eq!(db.read_log(job.job_id, "stdout", 0).await.unwrap(), (b"hello world\n".to_vec(), None));
    assert_eq!(db.read_log(job.job_id, "stdout", 8).await.unwrap(), (b"rld\n".to_vec(), None));
    assert_eq!(db.read_log(job.job_id, "stderr", 0).await.unwrap(), (b"oops\n".to_vec(), None));
    // A gang's other nodes keep theirs apart; a stream of no such name is refused.
    db.append_log(job.job_id, "node-2/stdout", 0, b"rank 2\n").await.unwrap();
    assert_eq!(db.read_log(job.job_id, "node-2/stdout", 0).await.unwrap(), (b"rank 2\n".to_vec(), None));
    assert_eq!(db.read_log(job.job_id, "stdout", 0).await.unwrap().0, b"hello world\n".to_vec());
    assert!(db.append_log(job.job_id, "node-0/stdout", 0, b"x").await.is_err());
    let (size, sha256, _) = db.log_summary(job.job_id, "stdout").await.unwrap().unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, b"hello world\n");
    assert_eq!((size, sha256), (12, digest.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>()));
    // The chunks go with the job's mission (the job stays, for accounting).
    store.delete_mission(mission.mission_id).await.unwrap();
    assert!(store.job(job.job_id).await.unwrap().is_some());
    assert_eq!(db.log_state(job.job_id, "stdout").await.unwrap(), (0, None));
}

/// Replicas share the sign-in brakes: failures and a rate per key.
#[tokio::test]
async fn postgres_shares_the_sign_in_brakes() {
    let Some(database) = mission_store::test_support::PostgresDatabase::create().await else { return };
    let store = Store::open(&database.url).await.unwrap();
    let db = store.cluster().unwrap();
    let keys = ["user:alice".to_owned(), "addr:10.0.0.1".to_owned()];
    assert_eq!(db.brake_wait(&keys).await.unwrap(), None);
    let wait = |count: u64| (count > 2).then_some(std::time::Duration::from_secs(60));
    for _ in 0..2 {
        db.brake_failed("user:alice", wait).await.unwrap();
    }
    assert_eq!(db.brake_wait(&keys).await.unwrap(), None, "the free failures");
    db.brake_failed("user:alice", wait).await.unwrap();
    let held = db.brake_wait(&keys).await.unwrap().expect("held back");
    assert!(held > std::time::Duration::from_secs(55), "{held:?}");
    assert_eq!(db.brake_wait(&["user:bob".to_owned()]).await.unwrap(), None);
    db.brake_clear("user:alice").await.unwrap();
    assert_eq!(db.brake_wait(&keys).await.unwrap(), None);

    let window = std::time::Duration::from_secs(60);
    for _ in 0..3 {
        assert_eq!(db.brake_rate("codes:10.0.0.1", 3, window).await.unwrap(), Ok(()));
    }
    let refused = db.brake_rate("codes:10.0.0.1", 3, window).await.unwrap().unwrap_err();
    assert!(refused <= window && refused > std::time::Duration::from_secs(55), "{refused:?}");
    assert_eq!(db.brake_rate("codes:10.0.0.2", 3, window).await.unwrap(), Ok(()));
    assert_eq!(db.sweep_brakes().await.unwrap(), 0, "nothing is a day old");
}

/// With `sslmode=verify-full` and the CA that signed the test server's certificate (made by
/// `scripts/postgres-test-server.sh`), the store speaks TLS to PostgreSQL; with a CA that did
/// not sign it, opening is refused.
#[tokio::test]
async fn postgres_over_tls_verifies_the_servers_certificate() {
    use mission_store::test_support::PostgresDatabase;
    use sqlx::Connection;
    let Some(database) = PostgresDatabase::create().await else { return };
    let with_ca =
        |ca: &std::path::Path| format!("{}?sslmode=verify-full&sslrootcert={}", database.url.expose(), ca.display());
    let url = with_ca(&PostgresDatabase::ca_file().await);
    let store = Store::open(&url.parse().unwrap()).await.unwrap();
    store.ping().await.unwrap();
    let mut connection = sqlx::PgConnection::connect(&url).await.unwrap();
    let (tls,): (bool,) = sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert!(tls, "the connection is encrypted");

    let other = tempfile::tempdir().unwrap();
    let ca = other.path().join("other-ca.crt");
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=Another CA"])
        .arg("-keyout")
        .arg(other.path().join("other-ca.key"))
        .arg("-out")
        .arg(&ca)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let refused = Store::open(&with_ca(&ca).parse().unwrap()).await.unwrap_err().to_string();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");
    assert!(!refused.contains(&database.url.expose().split('@').next().unwrap()[11..]), "no password: {refused}");
}
