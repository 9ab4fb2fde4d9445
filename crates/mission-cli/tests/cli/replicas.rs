//! Two `mission server` processes on one PostgreSQL database, with the S3 test server as their
//! shared default storage, serve one service: the leader is killed with SIGKILL while jobs run
//! and arrive, the other takes over, every job completes exactly once, and the killed replica
//! restarts and rejoins.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mission_client::{Client, Error, Job, JobResources, JobStatus, ListJobs, LogStream, RegisterLandingZone};
use mission_testkit::{PostgresDatabase, S3Server};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::BIN;
use super::jobs::{SHELL, local_station, mission, wait_until};

/// Seconds of an LZ's lease: short, so a takeover's wait for the agents is short too.
const LEASE: &str = "6";

/// One `mission server` process of the service.
struct Replica {
    child: Child,
    url: String,
}

impl Replica {
    /// Starts a replica listening on `listen`, sharing `shared` (keys) and `s3` (storage) with
    /// the others, its data dir `data`; `issuer` is the service's public URL when it is not this
    /// replica's.
    async fn start(
        database: &str,
        s3: &S3Server,
        shared: &Path,
        data: &Path,
        listen: &str,
        issuer: Option<&str>,
    ) -> Self {
        Self::start_with(database, s3, shared, data, listen, issuer, &[]).await
    }

    /// Like [`Replica::start`], with `extra` flags.
    async fn start_with(
        database: &str,
        s3: &S3Server,
        shared: &Path,
        data: &Path,
        listen: &str,
        issuer: Option<&str>,
        extra: &[&str],
    ) -> Self {
        let mut command = Command::new(BIN);
        command
            .args(["server", "--listen", listen, "--device-poll-interval", "0", "--lz-lease", LEASE])
            .arg("--data-dir")
            .arg(data)
            .arg("--key-dir")
            .arg(shared.join("keys"))
            .args(["--storage", &format!("s3://{}/service", s3.bucket), "--storage-endpoint", &s3.endpoint])
            .args(["--storage-region", &s3.region])
            .env("MISSION_STORAGE_ACCESS_KEY_ID", &s3.access_key_id)
            .env("MISSION_STORAGE_SECRET_ACCESS_KEY", &s3.secret_access_key)
            .env("MISSION_DATABASE_URL", database)
            .args(extra)
            .env_remove("MISSION_SERVER")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(issuer) = issuer {
            command.args(["--public-url", issuer]);
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.starts_with("No embedded landing zone") {
                    return;
                }
            }
            panic!("the replica stopped before it was ready");
        });
        url.await.expect("the replica starts within 30 s");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, url: format!("http://{listen}") }
    }
}

/// Whether the replica at `url` runs the scheduler, from its metrics.
async fn leads(url: &str) -> bool {
    let metrics = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    metrics.contains("mission_scheduler_leader 1")
}

/// A free address on 127.0.0.1.
fn free_address() -> String {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    socket.local_addr().unwrap().to_string()
}

/// A `mission lz` agent knowing every replica.
fn agent(servers: &str, token: &str, data: PathBuf) -> Child {
    Command::new(BIN)
        .args(["lz", "--server", servers, "--lz-cpus", "2", "--lz-memory", "4096", "--data-dir"])
        .arg(data)
        .env("MISSION_LZ_TOKEN", token)
        .env_remove("MISSION_LZ_GPUS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Submits a job through `first`, or through `second` when `first` does not answer.
async fn submit(first: &Client, second: &Client, mission: mission_client::Uuid) -> Job {
    match first.run_job_on_station(mission, local_station(), JobResources::default()).await {
        Ok(job) => job,
        Err(Error::Http(_)) => {
            second.run_job_on_station(mission, local_station(), JobResources::default()).await.unwrap()
        }
        Err(e) => panic!("submitting a job: {e}"),
    }
}

#[tokio::test]
async fn the_leader_is_killed_and_every_job_completes_once() {
    let Some(database) = PostgresDatabase::create().await else { return };
    let Some(s3) = S3Server::start().await else { return };
    let database = database.url.expose().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let (a_address, b_address) = (free_address(), free_address());
    // A starts first, so it leads; its URL is the service's public URL.
    let mut a = Replica::start(&database, &s3, dir.path(), &dir.path().join("a"), &a_address, None).await;
    let b = Replica::start(&database, &s3, dir.path(), &dir.path().join("b"), &b_address, Some(&a.url)).await;
    let password = std::fs::read_to_string(dir.path().join("a/initial-admin-password")).unwrap();
    let token = mission_testkit::device_sign_in(&a.url, "admin", password.trim()).await.0.access_token;
    let on_a = Client::with_access_token(&a.url, &token).unwrap();
    let on_b = Client::with_access_token(&b.url, &token).unwrap();
    assert_eq!(on_b.whoami().await.unwrap().username, "admin", "a token from A works on B");

    let servers = format!("{},{}", a.url, b.url);
    let mut agents = Vec::new();
    for name in ["node-1", "node-2"] {
        let lz = on_b
            .register_landing_zone(local_station(), &RegisterLandingZone { name: name.into(), cluster_account: None })
            .await
            .unwrap();
        agents.push(agent(&servers, &lz.token, dir.path().join(name)));
    }
    wait_until("both agents are online", || async {
        on_a.list_landing_zones(local_station()).await.unwrap().iter().filter(|lz| lz.online).count() == 2
    })
    .await;
    let sleeper = mission(&on_a, SHELL, &[("run.sh", "echo ran\nsleep 0.2\n")], &[]).await;
    assert_eq!((leads(&a.url).await, leads(&b.url).await), (true, false), "A leads");

    // Half the jobs arrive, alternately through A and B; the leader dies with jobs running and
    // queued; the other half arrive (what was meant for A goes to B, as a failing-over client
    // does).
    let mut jobs = Vec::new();
    for i in 0..25 {
        let (first, second) = if i % 2 == 0 { (&on_a, &on_b) } else { (&on_b, &on_a) };
        jobs.push(submit(first, second, sleeper.mission_id).await);
    }
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    // A client naming both replicas carries on with the one that answers.
    let both = Client::with_access_token(&format!("{},{}", a.url, b.url), &token).unwrap();
    assert_eq!(both.whoami().await.unwrap().username, "admin");
    assert_eq!(both.base_url(), b.url);
    for i in 0..25 {
        let (first, second) = if i % 2 == 0 { (&on_a, &on_b) } else { (&on_b, &on_a) };
        jobs.push(submit(first, second, sleeper.mission_id).await);
    }

    // B takes over: every job completes, each having run once.
    wait_until("B leads", || leads(&b.url)).await;
    for job in &jobs {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let done = loop {
            let now = on_b.get_job(job.job_id).await.unwrap();
            if now.status.is_final() {
                break now;
            }
            assert!(tokio::time::Instant::now() < deadline, "job {} did not end: {now:?}", job.job_id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        let runs = done.history.iter().filter(|t| t.status == JobStatus::Running).count();
        assert_eq!(runs, 1, "job {} ran {runs} times: {:?}", job.job_id, done.history);
    }
    let everything = ListJobs { page: 1, items: 100, ..Default::default() };
    let listed = on_b.list_jobs(&everything).await.unwrap();
    assert_eq!(listed.len(), jobs.len(), "the survivor reports every job, and no other");
    // Their output, sent to either replica, reads from the survivor: before the kill and after.
    for job in [&jobs[0], &jobs[49]] {
        assert_eq!(on_b.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "ran\n");
    }
    assert!(jobs.iter().all(|j| listed.iter().any(|l| l.job_id == j.job_id && l.status == JobStatus::Completed)));

    // A restarts on its address and rejoins: it answers, and the old token still works there.
    let a = Replica::start(&database, &s3, dir.path(), &dir.path().join("a"), &a_address, None).await;
    assert!(!leads(&a.url).await, "B keeps the lead");
    let job = on_a.get_job(jobs[0].job_id).await.unwrap();
    assert_eq!(job.status, JobStatus::Completed);
    let one_more = submit(&on_a, &on_b, sleeper.mission_id).await;
    wait_until("a job submitted through the rejoined replica completes", || async {
        on_b.get_job(one_more.job_id).await.unwrap().status == JobStatus::Completed
    })
    .await;
    drop((a, b, agents));
}

/// A session runs on an agent connected to one replica and is opened through the other: the
/// other replica has the agent (through the leader) open a tunnel to it, at its --advertise-url.
#[tokio::test]
async fn a_session_is_reached_through_a_replica_its_agent_is_not_connected_to() {
    let Some(database) = PostgresDatabase::create().await else { return };
    let Some(s3) = S3Server::start().await else { return };
    let database = database.url.expose().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let (a_address, b_address) = (free_address(), free_address());
    let (a_url, b_url) = (format!("http://{a_address}"), format!("http://{b_address}"));
    let a = Replica::start_with(
        &database,
        &s3,
        dir.path(),
        &dir.path().join("a"),
        &a_address,
        None,
        &["--advertise-url", &a_url],
    )
    .await;
    let b = Replica::start_with(
        &database,
        &s3,
        dir.path(),
        &dir.path().join("b"),
        &b_address,
        Some(&a.url),
        &["--advertise-url", &b_url],
    )
    .await;
    let password = std::fs::read_to_string(dir.path().join("a/initial-admin-password")).unwrap();
    let token = mission_testkit::device_sign_in(&a.url, "admin", password.trim()).await.0.access_token;
    let on_a = Client::with_access_token(&a.url, &token).unwrap();
    let lz = on_a
        .register_landing_zone(local_station(), &RegisterLandingZone { name: "node".into(), cluster_account: None })
        .await
        .unwrap();
    // The agent knows replica A alone.
    let _agent = agent(&a.url, &lz.token, dir.path().join("node"));
    wait_until("the agent is online", || async {
        on_a.list_landing_zones(local_station()).await.unwrap().iter().any(|lz| lz.online)
    })
    .await;
    let app =
        mission(&on_a, SHELL, &[("run.sh", "exec python3 app.py\n"), ("app.py", super::sessions::APP)], &[]).await;
    let request = mission_client::RunJob {
        station_id: local_station(),
        session: Some(mission_client::SessionRequest {
            kind: mission_client::SessionKind::Web,
            idle_timeout: None,
            share_with_managers: false,
        }),
        ..Default::default()
    };
    let job = on_a.run_job(app.mission_id, &request).await.unwrap();
    wait_until("the session answers", || async {
        on_a.get_job(job.job_id).await.unwrap().session.and_then(|s| s.url).is_some()
    })
    .await;
    let http = reqwest::Client::new();
    for replica in [&b.url, &a.url] {
        let page =
            http.get(format!("{replica}/sessions/{}/through", job.job_id)).bearer_auth(&token).send().await.unwrap();
        assert_eq!(page.status(), 200, "through {replica}");
        assert!(page.text().await.unwrap().contains("path=/through"));
    }
    on_a.stop_job(job.job_id).await.unwrap();
}
