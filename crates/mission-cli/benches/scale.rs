//! The queue at scale: the release `mission server` with a million queued jobs, through the
//! public API, against the same server with an empty queue in the same run.
//!
//! - jobs queued by arrays of 100,000 (`BENCH_SCALE_JOBS`, default 1,000,000) while no landing
//!   zone is online: the time each request took, the server's RSS per queued job;
//! - `GET /jobs?statuses=queued` and `GET /jobs/{id}` p50/p99 with them all queued;
//! - the server restarted on the same data: the time until it answers again and runs the
//!   scheduler (its rebuild);
//! - then an agent (`mission lz`, this host's CPUs) drains `BENCH_DRAIN_JOBS` (default 2,000) of
//!   them: jobs/s and server CPU per job, against an agent draining an array of as many jobs on
//!   a server with nothing else queued. The two drain in turns of a quarter each, alternating
//!   which goes first, the other's agent paused (`SIGSTOP`) meanwhile, so that both see the
//!   same moments of a shared, noisy machine: single drains one after the other gave ratios
//!   from 47% to 134% for the same code.
//!
//! Run: `cargo bench -p mission-cli --bench scale` (`BENCH_DATABASE=postgres`: one replica on
//! PostgreSQL; the RSS is the replica's). Read the ratios, which come from one run.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use mission_client::{Client, JobStatus, ListJobs, RegisterLandingZone, RunJob, RunJobArray};

use common::{Deployment, Service, percentile, rss_kib};

const SCRIPT: &str = "true\n";
const ARRAY_REQUEST: usize = 100_000;
const NO_LZ: &[&str] = &["--no-local-lz"];
/// Turns each drain takes.
const DRAIN_TURNS: u64 = 4;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A server with no embedded landing zone, signed in as its admin, with a mission of one
/// trivial script and a landing zone registered on the `local` station but not running.
struct Setup {
    service: Service,
    database: mission_store::DatabaseUrl,
    url: String,
    client: Client,
    mission_id: uuid::Uuid,
    run: RunJob,
    lz_token: String,
}

async fn setup(home: &Path, deployment: Deployment) -> Setup {
    let database = deployment.database(home).await;
    let service = Service::start(deployment, home, &database, NO_LZ).await;
    let url = service.urls()[0].clone();
    let password = std::fs::read_to_string(service.data_dir.join("initial-admin-password")).unwrap();
    let (tokens, auth) = common::sign_in(&url, "admin", password.trim()).await;
    let client = Client::with_tokens(&url, tokens, auth).unwrap();
    let station = client.list_stations().await.unwrap().into_iter().find(|s| s.name == "local").unwrap();
    let registered = client
        .register_landing_zone(
            station.station_id,
            &RegisterLandingZone { name: "worker".into(), cluster_account: None },
        )
        .await
        .unwrap();
    let src = home.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), SCRIPT).unwrap();
    let mission = common::shell_mission(&client, "scale", &src).await;
    let run = RunJob {
        station_id: station.station_id,
        cpu_count: Some(1),
        memory_amount: Some(64),
        gpu_count: Some(0),
        ..Default::default()
    };
    Setup { service, database, url, client, mission_id: mission.mission_id, run, lz_token: registered.token }
}

/// Starts the registered landing zone's agent.
fn agent(home: &Path, url: &str, token: &str) -> tokio::process::Child {
    common::spawn_agent(url, token, &home.join("lz"), &[])
}

/// A server whose agent drains an array in turns.
struct Drainer {
    client: Client,
    array: uuid::Uuid,
    service: Service,
    agent: tokio::process::Child,
    /// Elements that will have completed at the end of the turns so far.
    target: u64,
    /// Time and server CPU time the turns took.
    time: Duration,
    cpu: Duration,
}

impl Drainer {
    /// A drainer of `array` on `service`, its `agent` paused until its first turn.
    fn new(client: Client, array: uuid::Uuid, service: Service, agent: tokio::process::Child) -> Self {
        signal(&agent, "STOP");
        Self { client, array, service, agent, target: 0, time: Duration::ZERO, cpu: Duration::ZERO }
    }

    /// Lets the agent run until `n` more elements of the array completed than the turns so far
    /// asked for (jobs that end while it is paused count for the next turn); adds the time and
    /// the server's CPU time it took. (Only the array that drains is asked: jobs go in order,
    /// so the first array's elements run first.)
    async fn turn(&mut self, n: u64) {
        signal(&self.agent, "CONT");
        self.target += n;
        let (started, cpu) = (Instant::now(), self.service.cpu_time());
        while self.client.get_job_array(self.array).await.unwrap().completed < self.target {
            assert!(started.elapsed() < Duration::from_secs(1800), "the drain did not finish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.time += started.elapsed();
        self.cpu += self.service.cpu_time().saturating_sub(cpu);
        signal(&self.agent, "STOP");
    }
}

/// Sends `SIGSTOP` or `SIGCONT` to a process.
fn signal(child: &tokio::process::Child, name: &str) {
    let pid = child.id().expect("the agent runs").to_string();
    let status = std::process::Command::new("kill").args([&format!("-{name}"), &pid]).status().unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Waits until the server at `url` runs the scheduler: at once in one process, whose rebuild
/// comes before it answers; on PostgreSQL a replica answers first and then takes the lead and
/// rebuilds.
async fn leading(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let metrics = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
        if metrics.lines().any(|l| l == "mission_scheduler_leader 1") {
            return;
        }
        assert!(Instant::now() < deadline, "the restarted server did not take the scheduler's lead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let value = f.await;
    (value, started.elapsed())
}

#[tokio::main]
async fn main() {
    let total = env_or("BENCH_SCALE_JOBS", 1_000_000);
    let drained = env_or("BENCH_DRAIN_JOBS", 2_000) as u64;
    assert!(drained as usize <= ARRAY_REQUEST.min(total), "the drain stays within the first array");
    assert!(drained.is_multiple_of(DRAIN_TURNS), "BENCH_DRAIN_JOBS is a multiple of {DRAIN_TURNS}");

    let deployment = Deployment::from_env();
    let home = tempfile::tempdir().unwrap();
    let mut full = setup(home.path(), deployment).await;
    let pid = full.service.replicas[0].0.id().unwrap();
    let rss_before = rss_kib(pid);
    let mut arrays = Vec::new();
    let mut requests = Vec::new();
    let mut queued = 0;
    while queued < total {
        let n = ARRAY_REQUEST.min(total - queued);
        let request = RunJobArray { run: full.run.clone(), range: Some(format!("1-{n}")), ..Default::default() };
        let (array, took) = timed(full.client.run_job_array(full.mission_id, &request)).await;
        arrays.push(array.unwrap().array_id);
        requests.push(took);
        queued += n;
    }
    let rss_queued = rss_kib(pid);
    let per_job = (rss_queued.saturating_sub(rss_before) * 1024) as f64 / total as f64;

    // Reads with them all queued.
    let (mut lists, mut gets) = (Vec::new(), Vec::new());
    let queued_only = ListJobs { statuses: vec![JobStatus::Queued], ..Default::default() };
    let mut ids = Vec::new();
    for i in 0..200u32 {
        let page = ListJobs { page: 1 + i * 97 % 4000, ..queued_only.clone() };
        let (page, took) = timed(full.client.list_jobs(&page)).await;
        ids.extend(page.unwrap().into_iter().map(|j| j.job_id).take(1));
        lists.push(took);
    }
    for id in &ids {
        let (job, took) = timed(full.client.get_job(*id)).await;
        assert!(job.unwrap().position.is_some(), "a queued job has a position");
        gets.push(took);
    }
    lists.sort();
    gets.sort();

    // A restart: until the server answers again on the same data.
    for (replica, _) in &mut full.service.replicas {
        replica.kill().await.unwrap();
        let _ = replica.wait().await;
    }
    let (service, rebuild) = timed(async {
        let service = Service::start(deployment, home.path(), &full.database, NO_LZ).await;
        leading(&service.urls()[0]).await;
        service
    })
    .await;
    let url = service.urls()[0].clone();
    let rss_rebuilt = rss_kib(service.replicas[0].0.id().unwrap());
    full.service = service;
    let password = std::fs::read_to_string(full.service.data_dir.join("initial-admin-password")).unwrap();
    let (tokens, auth) = common::sign_in(&url, "admin", password.trim()).await;
    let client = Client::with_tokens(&url, tokens, auth).unwrap();

    let full_agent = agent(home.path(), &url, &full.lz_token);
    let mut full_drain = Drainer::new(client, arrays[0], full.service, full_agent);

    // The baseline: a server with nothing queued but an array of the jobs it drains.
    let empty_home = tempfile::tempdir().unwrap();
    let empty = setup(empty_home.path(), deployment).await;
    let request = RunJobArray { run: empty.run.clone(), range: Some(format!("1-{drained}")), ..Default::default() };
    let array = empty.client.run_job_array(empty.mission_id, &request).await.unwrap();
    let empty_agent = agent(empty_home.path(), &empty.url, &empty.lz_token);
    let mut empty_drain = Drainer::new(empty.client, array.array_id, empty.service, empty_agent);
    for turn in 0..DRAIN_TURNS {
        let (first, second) =
            if turn % 2 == 0 { (&mut empty_drain, &mut full_drain) } else { (&mut full_drain, &mut empty_drain) };
        first.turn(drained / DRAIN_TURNS).await;
        second.turn(drained / DRAIN_TURNS).await;
    }
    let (empty_time, empty_cpu, full_time, full_cpu) =
        (empty_drain.time, empty_drain.cpu, full_drain.time, full_drain.cpu);

    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    let rate = |t: Duration| drained as f64 / t.as_secs_f64();
    requests.sort();
    println!("| measure ({}) | value | target |", deployment.label());
    println!("|---|---|---|");
    println!(
        "| {total} jobs queued by arrays of {ARRAY_REQUEST}: request time median / max | {} / {} | seconds, not minutes |",
        ms(percentile(&requests, 0.5)),
        ms(*requests.last().unwrap())
    );
    println!(
        "| server RSS per queued job | {per_job:.0} B ({} MB in all) | ≤ 300 B |",
        (rss_queued - rss_before) / 1024
    );
    println!(
        "| restart until the server answers and leads the scheduler (rebuild) | {} (RSS after: {} MB) | < 10 s |",
        ms(rebuild),
        rss_rebuilt / 1024
    );
    println!(
        "| GET /jobs?statuses=queued p50 / p99 | {} / {} | p99 < 10 ms |",
        ms(percentile(&lists, 0.5)),
        ms(percentile(&lists, 0.99))
    );
    println!(
        "| GET /jobs/{{id}} p50 / p99 | {} / {} | p99 < 10 ms |",
        ms(percentile(&gets, 0.5)),
        ms(percentile(&gets, 0.99))
    );
    println!(
        "| drain, empty queue: {drained} jobs | {:.0} jobs/s, server CPU {} per job | |",
        rate(empty_time),
        ms(empty_cpu / drained as u32)
    );
    println!(
        "| drain, {total} queued: {drained} jobs | {:.0} jobs/s, server CPU {} per job | |",
        rate(full_time),
        ms(full_cpu / drained as u32)
    );
    println!("| drain rate, full against empty | {:.0}% | ≥ 90% |", 100.0 * rate(full_time) / rate(empty_time));
    println!(
        "| server CPU per job, full against empty | {:.2}× | ≤ 1.2× |",
        full_cpu.as_secs_f64() / empty_cpu.as_secs_f64().max(1e-9)
    );
}
