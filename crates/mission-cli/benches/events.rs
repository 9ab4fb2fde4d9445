//! Event stream benchmark (issue 19), against the real release `mission server` with its
//! embedded landing zone:
//!
//! - delivery latency: from a job's transition (the event's `at`, stamped by the server as it
//!   writes the transition) to an SSE client of `GET /api/v1/events` reading it, and to a
//!   webhook receiver on 127.0.0.1 taking its POST, p50 and p99 over every transition of
//!   `BENCH_EVENT_JOBS` jobs run one at a time;
//! - `mission run M --wait` of a trivial job as a whole CLI process, p50 over 30 runs, against
//!   `mission jobs get JOB` (one request, the process's floor) in the same run;
//! - throughput of `BENCH_EVENT_BATCH` trivial jobs submitted at once, with no event stream
//!   open, with `BENCH_SUBSCRIBERS` (1,000) open that watch another mission (connected, sent
//!   nothing: many users each watching their own work), and with as many watching everything
//!   (each of them sent every event), in the same run.
//!
//! Run: `cargo bench -p mission-cli --bench events`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use mission_client::{Client, CreateMission, CreateWebhook, JobStatus, RunJob, Uuid, WatchEvents};

use common::{SignedIn, bin, percentile};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Submits `n` jobs at once and waits for the last to end; answers the time from the first
/// submission.
async fn batch(client: &Client, mission: Uuid, station: Uuid, n: usize) -> Duration {
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(client.run_job(mission, &RunJob { station_id: station, ..Default::default() }).await.unwrap().job_id);
    }
    for id in ids {
        assert_eq!(client.wait_for_job(id).await.unwrap().status, JobStatus::Completed);
    }
    started.elapsed()
}

/// Runs `work` with `n` event streams open as `watch` says, each read to its end.
async fn with_streams<T>(client: &Client, watch: &WatchEvents, n: usize, work: impl Future<Output = T>) -> T {
    let mut streams = Vec::new();
    for _ in 0..n {
        streams.push(client.watch_events(watch).await.unwrap());
    }
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| tokio::spawn(async move { while stream.next().await.is_ok() {} }))
        .collect();
    let done = work.await;
    for reader in readers {
        reader.abort();
    }
    done
}

#[tokio::main]
async fn main() {
    let jobs = env_or("BENCH_EVENT_JOBS", 100);
    let batch_jobs = env_or("BENCH_EVENT_BATCH", 300);
    let subscribers = env_or("BENCH_SUBSCRIBERS", 1000);
    let root = tempfile::tempdir().unwrap();
    let receiver = mission_testkit::Receiver::start(|_, _| 204).await;
    let target = format!("{}/", receiver.url);
    let service = SignedIn::start_with(root.path(), "bench", "bench password 1", &["--webhook-target", &target]).await;
    let client = &service.client;
    let station = client.list_stations().await.unwrap().into_iter().find(|s| s.name == "local").unwrap().station_id;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client.list_landing_zones(station).await.unwrap().iter().any(|lz| lz.online) {
        assert!(Instant::now() < deadline, "the embedded LZ did not come online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let request = CreateMission {
        name: "events bench".into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        ..Default::default()
    };
    let mission = client.create_mission(&request).await.unwrap().mission_id;
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "true\n").unwrap();
    client.upload(mission, src.join("run.sh"), None, false).await.unwrap();

    // Delivery latency: every transition of jobs run one at a time, to a stream and a webhook.
    let hook = CreateWebhook { url: format!("{target}jobs"), kinds: vec!["job".into()], ..Default::default() };
    let hook = client.create_webhook(&hook).await.unwrap();
    let watch = WatchEvents { kinds: vec!["job".into()], ..Default::default() };
    let mut events = client.watch_events(&watch).await.unwrap();
    let mut latencies = Vec::new();
    for _ in 0..jobs {
        client.run_job(mission, &RunJob { station_id: station, ..Default::default() }).await.unwrap();
        loop {
            let event = events.next().await.unwrap();
            latencies.push((Utc::now() - event.at).to_std().unwrap_or_default());
            if event.job_status().is_some_and(JobStatus::is_final) {
                break;
            }
        }
    }
    latencies.sort();
    let expected = latencies.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while receiver.received().len() < expected {
        assert!(Instant::now() < deadline, "the webhook got {} of {expected} events", receiver.received().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut hooked: Vec<Duration> = receiver
        .received()
        .iter()
        .map(|r| {
            let at: chrono::DateTime<Utc> = serde_json::from_value(r.json()["at"].clone()).unwrap();
            (chrono::DateTime::<Utc>::from(r.at) - at).to_std().unwrap_or_default()
        })
        .collect();
    hooked.sort();
    client.delete_webhook(hook.webhook_id).await.unwrap();

    // `mission run --wait` as a whole process, and one request's process as its floor.
    let cli = |args: Vec<String>| {
        let mut command = std::process::Command::new(bin());
        command.args(args).envs(service.cli_env()).stdout(std::process::Stdio::null());
        let started = Instant::now();
        assert!(command.status().unwrap().success());
        started.elapsed()
    };
    let run_args = vec!["run".to_owned(), mission.to_string(), "--wait".to_owned()];
    let last_job = client.list_jobs(&Default::default()).await.unwrap()[0].job_id;
    let get_args = vec!["jobs".to_owned(), "get".to_owned(), last_job.to_string()];
    let (mut waits, mut gets) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        waits.push(cli(run_args.clone()));
        gets.push(cli(get_args.clone()));
    }
    waits.sort();
    gets.sort();

    // Throughput with no subscriber, then with many connected that are sent nothing, then with
    // as many that are sent everything, in the same run.
    let quiet = batch(client, mission, station, batch_jobs).await;
    let elsewhere = service.new_mission("watched by the streams, never run").await;
    let others = WatchEvents { mission_ids: vec![elsewhere], ..Default::default() };
    let idle = with_streams(client, &others, subscribers, batch(client, mission, station, batch_jobs)).await;
    let watched =
        with_streams(client, &WatchEvents::default(), subscribers, batch(client, mission, station, batch_jobs)).await;

    println!("| measure | value | target |");
    println!("|---|---|---|");
    println!("| SSE delivery p50 ({} transitions) | {} | < 5 ms |", latencies.len(), ms(percentile(&latencies, 0.5)));
    println!("| SSE delivery p99 | {} | |", ms(percentile(&latencies, 0.99)));
    println!("| webhook delivery p50 ({} POSTs) | {} | |", hooked.len(), ms(percentile(&hooked, 0.5)));
    println!("| webhook delivery p99 | {} | |", ms(percentile(&hooked, 0.99)));
    println!("| `mission run M --wait` p50 (30 processes) | {} | < 30 ms |", ms(percentile(&waits, 0.5)));
    println!("| `mission run M --wait` p99 | {} | |", ms(percentile(&waits, 0.99)));
    println!("| `mission jobs get` p50 (one request, same run) | {} | |", ms(percentile(&gets, 0.5)));
    let rate = |d: Duration| batch_jobs as f64 / d.as_secs_f64();
    println!("| {batch_jobs} jobs at once, no stream open | {:.0} jobs/s | |", rate(quiet));
    println!("| with {subscribers} streams open, watching another mission | {:.0} jobs/s | within 10% |", rate(idle));
    println!("| ratio | {:.0}% | ≥ 90% |", 100.0 * rate(idle) / rate(quiet));
    println!("| with {subscribers} streams open, each sent every event | {:.0} jobs/s | |", rate(watched));
    println!("| ratio | {:.0}% | |", 100.0 * rate(watched) / rate(quiet));
    drop(service);
}
