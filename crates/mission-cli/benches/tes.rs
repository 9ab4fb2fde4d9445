//! GA4GH TES benchmark (issue 53), in one run on this machine, against `mission server` with two
//! `mission lz` agents (Podman) on its default station and the S3 test server:
//!
//! - submit → RUNNING: `BENCH_TES_LATENCY` (20) tasks sent to `POST /ga4gh/tes/v1/tasks`, one
//!   after another, each an executor running `true` in the test image, against as many plain jobs
//!   of a mission in the same image, from the job's submission to its `running` transition as the
//!   server recorded them (target: the task within 10% + 20 ms of the plain job), and to its
//!   completion;
//! - a shared input: `BENCH_TES_TASKS` (1,000) tasks, each reading the same
//!   `BENCH_TES_INPUT_MB` (100) MB `s3://` object through an S3 cargo bay, over the two landing
//!   zones: how many times and how many bytes the landing zones fetched its content from the
//!   service (counted by the server's `mission_http_requests_total`; target: at most once per
//!   landing zone), and how often the service looked the object up (a HEAD per task).
//!
//! Run (as root, with Podman, the image and the S3 server from `scripts/install-test-deps.sh`):
//! `cargo bench -p mission-cli --bench tes`.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mission_client::{ImportImage, JobResources, JobStatus, RegisterLandingZone, UpdateMission};
use serde_json::{Value, json};

use common::{SignedIn, percentile, shell_mission};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// From a job's submission to its transition to `status`, as the server recorded them.
fn until(job: &mission_client::Job, status: JobStatus) -> Duration {
    let at = job.history.iter().find(|t| t.status == status).expect("it got there").at;
    (at - job.created_at).to_std().unwrap_or_default()
}

/// The sum of `mission_http_requests_total` over the GET routes `route` accepts, status 200.
async fn requests(url: &str, route: impl Fn(&str) -> bool) -> u64 {
    let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|line| line.starts_with("mission_http_requests_total{method=\"GET\""))
        .filter(|line| line.contains("status=\"200\""))
        .filter(|line| line.split("route=\"").nth(1).and_then(|r| r.split('"').next()).is_some_and(&route))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::main]
async fn main() {
    let archive = PathBuf::from(std::env::var("MISSION_TEST_IMAGE").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/test-image/debian-bookworm.tar").to_owned()
    }));
    assert!(archive.is_file(), "no image archive at {} (scripts/install-test-deps.sh builds it)", archive.display());
    let latency_runs = env_or("BENCH_TES_LATENCY", 20);
    let tasks = env_or("BENCH_TES_TASKS", 1000);
    let input_mb = env_or("BENCH_TES_INPUT_MB", 100);
    let s3 = mission_testkit::S3Server::start().await.expect("the S3 test server (scripts/install-test-deps.sh)");
    let root = tempfile::tempdir().unwrap();
    let extra = ["--no-local-lz", "--s3-endpoint", &s3.endpoint];
    // An admin, who may make a station: one of the benchmark's own, which its tasks name as
    // their zone.
    let service = SignedIn::start_as(root.path(), "bench", "bench-password-1", true, &extra).await;
    let (client, url, access_token) = (&service.client, service.url.clone(), service.access_token.clone());
    let create = mission_client::CreateStation { name: "tes".into(), ..Default::default() };
    let station = client.create_station(&create).await.unwrap().station_id;
    let mut agents = Vec::new();
    for name in ["lz-a", "lz-b"] {
        let registered = RegisterLandingZone { name: name.into(), cluster_account: None };
        let registered = client.register_landing_zone(station, &registered).await.unwrap();
        agents.push(common::spawn_agent(&url, &registered.token, &root.path().join(name), &["--lz-cpus", "2"]));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.list_landing_zones(station).await.unwrap().iter().filter(|lz| lz.online).count() < 2 {
        assert!(Instant::now() < deadline, "the landing zones did not come online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.import_image(&archive, &ImportImage { name: "debian".into(), ..Default::default() }, None).await.unwrap();
    let http = reqwest::Client::new();
    let tes = format!("{url}/ga4gh/tes/v1");
    let create = |task: Value| {
        let (http, tes, token) = (http.clone(), tes.clone(), access_token.clone());
        async move {
            let answer = http.post(format!("{tes}/tasks")).bearer_auth(token).json(&task).send().await.unwrap();
            assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
            answer.json::<Value>().await.unwrap()["id"].as_str().unwrap().parse::<mission_client::Uuid>().unwrap()
        }
    };

    // Submit → RUNNING, one at a time, after a first of each that loads the image everywhere.
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "true\n").unwrap();
    let mission = shell_mission(client, "trivial", &src).await;
    let changes = UpdateMission { image: Some("debian".into()), ..Default::default() };
    client.update_mission(mission.mission_id, &changes).await.unwrap();
    let (mut plain, mut task, mut plain_done, mut task_done) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..=latency_runs + 1 {
        let job = client.run_job_on_station(mission.mission_id, station, JobResources::default()).await.unwrap();
        let done = client.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        let id =
            create(json!({"executors": [{"image": "debian", "command": ["true"]}], "resources": {"zones": ["tes"]}}))
                .await;
        let ran = client.wait_for_job(id).await.unwrap();
        assert_eq!(ran.status, JobStatus::Completed, "{ran:?}");
        if i > 1 {
            plain.push(until(&done, JobStatus::Running));
            task.push(until(&ran, JobStatus::Running));
            plain_done.push(until(&done, JobStatus::Completed));
            task_done.push(until(&ran, JobStatus::Completed));
        }
    }
    for times in [&mut plain, &mut task, &mut plain_done, &mut task_done] {
        times.sort();
    }
    let line = |name: &str, times: &[Duration]| {
        println!("{name:<40} p50 {:>7.1} ms   p90 {:>7.1} ms", ms(percentile(times, 0.5)), ms(percentile(times, 0.9)))
    };
    println!("{latency_runs} of each, one after another, submission -> running:");
    line("plain job of a mission in the image", &plain);
    line("TES task, one executor in the image", &task);
    println!("and submission -> completed:");
    line("plain job of a mission in the image", &plain_done);
    line("TES task, one executor in the image", &task_done);
    let (ours, base) = (percentile(&task, 0.5), percentile(&plain, 0.5));
    let allowed = base.mul_f64(1.10) + Duration::from_millis(20);
    println!(
        "task against job p50: {:+.1} ms; within 10% + 20 ms = {:.1} ms: {}",
        ms(ours) - ms(base),
        ms(allowed),
        if ours <= allowed { "met" } else { "NOT met" }
    );

    if tasks == 0 {
        return;
    }
    // One input shared by every task: put in the bucket, reached through a cargo bay.
    let big = root.path().join("big.bin");
    common::write_incompressible(&big, input_mb);
    let size = std::fs::metadata(&big).unwrap().len();
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/test-venv/bin/python");
    let put = format!(
        "import boto3; boto3.client('s3', endpoint_url='{}', aws_access_key_id='{}', aws_secret_access_key='{}', \
         region_name='{}').upload_file('{}', '{}', 'shared/big.bin')",
        s3.endpoint,
        s3.access_key_id,
        s3.secret_access_key,
        s3.region,
        big.display(),
        s3.bucket
    );
    assert!(std::process::Command::new(python).args(["-c", &put]).status().unwrap().success());
    client.create_cargo_bay(&s3.cargo_bay("bench bucket")).await.unwrap();
    let content = |route: &str| route.contains("/inputs/{n}/content") || route.contains("/inputs/{n}/files/");
    let listing = |route: &str| route.ends_with("/inputs/{n}");
    let (fetched_before, listed_before) = (requests(&url, content).await, requests(&url, listing).await);
    let task = json!({
        "inputs": [{"url": format!("s3://{}/shared/big.bin", s3.bucket), "path": "/data/big.bin"}],
        "executors": [{"image": "debian", "command": ["test", "-s", "/data/big.bin"]}],
        "resources": {"zones": ["tes"]}
    });
    let started = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        ids.push(create(task.clone()).await);
    }
    let submitted = started.elapsed();
    let mut placed_on = std::collections::HashMap::new();
    for id in &ids {
        let done = client.wait_for_job(*id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        *placed_on.entry(done.lz_id).or_insert(0usize) += 1;
    }
    let span = started.elapsed();
    let fetched = requests(&url, content).await - fetched_before;
    let listed = requests(&url, listing).await - listed_before;
    println!(
        "{tasks} tasks sharing one {:.0} MB s3:// input over {} landing zones (tasks each ran: {:?}):",
        size as f64 / 1e6,
        placed_on.len(),
        placed_on.values().collect::<Vec<_>>()
    );
    println!("  submitted in {:.1} s; all completed in {:.1} s", submitted.as_secs_f64(), span.as_secs_f64());
    println!(
        "  its content fetched from the service {fetched} times = {:.0} MB ({:.2} copies per landing zone; target <= 1)",
        (fetched * size) as f64 / 1e6,
        fetched as f64 / placed_on.len() as f64
    );
    println!("  looked up (listed: the service's HEAD on the store) {listed} times");
    drop(agents);
}
