//! Job scheduling benchmark (issue 6), through the public API against the real release
//! `mission server` with its embedded landing zone offering 2 CPUs:
//!
//! - dispatch latency: from the run request to the job's process starting (the `running`
//!   transition the LZ reports right after the spawn), p50 and p99 over 200 jobs run one at a time;
//! - throughput: 1,000 trivial one-CPU jobs with one small input file, from the first submission
//!   to the last completion, against the floor of the same 1,000 commands spawned by
//!   `seq 1000 | xargs -P2` in the same run;
//! - a job array of 10,000 elements (`BENCH_ARRAY_JOBS`; 0 leaves it out, as for a
//!   `BENCH_MISSION_BIN` older than arrays) of the same job, one request, from submission to the
//!   last element's end (watched through the array's progress), in jobs/s against the 1,000 jobs
//!   submitted one request each;
//! - the server's CPU time per job (the embedded LZ runs in the same process, so this is
//!   server + agent), and the idle RSS of a separate `mission lz` agent.
//!
//! Run: `cargo bench -p mission-cli --bench jobs` (`BENCH_LATENCY_JOBS`, `BENCH_THROUGHPUT_JOBS`
//! change the counts; `BENCH_DATABASE=postgres` or `postgres2` runs the service on PostgreSQL with
//! one or two replicas, submissions spread over both, the embedded LZ on the first).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use mission_client::{Client, JobResources, JobStatus, ListJobs, RegisterLandingZone, RunJob};

use common::{Deployment, Service, percentile, rss_kib};

const SCRIPT: &str = "read line < input.txt\n";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// HTTP requests handled so far by all replicas, by method and route (from `/metrics`).
async fn requests_by_route(urls: &[String]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for url in urls {
        let text = reqwest::get(format!("{url}/metrics")).await.unwrap().text().await.unwrap();
        for line in text.lines().filter_map(|l| l.strip_prefix("mission_http_requests_total{")) {
            let (labels, n) = line.split_once("} ").unwrap();
            let field =
                |name: &str| labels.split(',').find_map(|l| l.strip_prefix(name)).unwrap_or("").trim_matches('"');
            let route = format!("{} {}", field("method="), field("route="));
            *counts.entry(route).or_default() += n.parse::<u64>().unwrap();
        }
    }
    counts
}

/// The floor: the same trivial command, 1,000 times, two at a time, by xargs.
fn xargs_floor(dir: &std::path::Path, n: usize) -> Duration {
    let started = Instant::now();
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("seq {n} | xargs -P2 -I{{}} sh run.sh"))
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed()
}

#[tokio::main]
async fn main() {
    let latency_jobs = env_or("BENCH_LATENCY_JOBS", 200);
    let throughput_jobs = env_or("BENCH_THROUGHPUT_JOBS", 1000);
    let home = tempfile::tempdir().unwrap();
    let mut flags = vec!["--lz-cpus", "2"];
    if std::env::var_os("BENCH_NO_LIMITS").is_some() {
        flags.push("--lz-no-limits");
    }
    let deployment = Deployment::from_env();
    let database = deployment.database(home.path()).await;
    let service = Service::start(deployment, home.path(), &database, &flags).await;
    // A profiler attaches to the server before any job runs, so it sees the agent's spawner
    // start (bench/profile-jobs.sh creates this file once it records).
    if let Some(gate) = std::env::var_os("BENCH_START_GATE") {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::path::Path::new(&gate).exists() {
            assert!(Instant::now() < deadline, "nothing created BENCH_START_GATE within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let url = service.urls()[0].clone();
    let password = std::fs::read_to_string(service.data_dir.join("initial-admin-password")).unwrap();
    let (tokens, auth) = common::sign_in(&url, "admin", password.trim()).await;
    // One client per replica, all with the same token; requests alternate over them.
    let clients: Vec<Client> =
        service.urls().iter().map(|u| Client::with_access_token(u, &tokens.access_token).unwrap()).collect();
    let client = Client::with_tokens(&url, tokens, auth).unwrap();
    let station = client.list_stations().await.unwrap().into_iter().find(|s| s.name == "local").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client.list_landing_zones(station.station_id).await.unwrap().iter().any(|lz| lz.online) {
        assert!(Instant::now() < deadline, "the embedded LZ did not come online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let src = home.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), SCRIPT).unwrap();
    std::fs::write(src.join("input.txt"), "a small input file\n").unwrap();
    let mission = common::shell_mission(&client, "bench", &src).await;
    let one_cpu =
        JobResources { cpu_count: Some(1), memory_amount: Some(256), gpu_count: Some(0), ..Default::default() };
    let run = RunJob {
        station_id: station.station_id,
        lz_id: None,
        cpu_count: one_cpu.cpu_count,
        memory_amount: one_cpu.memory_amount,
        gpu_count: one_cpu.gpu_count,
        ..Default::default()
    };

    // Dispatch latency, one job at a time on an idle LZ (the first warms the input cache).
    client.wait_for_job(client.run_job(mission.mission_id, &run).await.unwrap().job_id).await.unwrap();
    let mut latencies = Vec::with_capacity(latency_jobs);
    for i in 0..latency_jobs {
        let asked = Utc::now();
        let job = clients[i % clients.len()].run_job(mission.mission_id, &run).await.unwrap();
        let done = client.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        let running = done.history.iter().find(|t| t.status == JobStatus::Running).unwrap().at;
        latencies.push((running - asked).to_std().unwrap_or_default());
    }
    latencies.sort();

    // Throughput: submit everything (8 submitters), wait for the last completion.
    let floor = xargs_floor(&src, throughput_jobs);
    let requests_before = requests_by_route(&service.urls()).await;
    let cpu_before = service.cpu_time();
    let started = Instant::now();
    let first_submit = Utc::now();
    let per_submitter = throughput_jobs.div_ceil(8);
    let mut submitters = Vec::new();
    for s in 0..8 {
        let (client, run) = (clients[s % clients.len()].clone(), run.clone());
        let n = per_submitter.min(throughput_jobs.saturating_sub(s * per_submitter));
        submitters.push(tokio::spawn(async move {
            let mut last = None;
            for _ in 0..n {
                let job = client.run_job(mission.mission_id, &run).await.unwrap();
                last = Some((job.created_at, job.job_id));
            }
            last
        }));
    }
    let mut last = None;
    for s in submitters {
        last = last.max(s.await.unwrap());
    }
    let submitted_in = started.elapsed();
    // Follow the last submission to its end (no polling load on the server meanwhile), then
    // make sure every job has ended.
    client.wait_for_job(last.expect("jobs were submitted").1).await.unwrap();
    let expected = (latency_jobs + 1 + throughput_jobs) as u64;
    let ended = ListJobs {
        mission_ids: vec![mission.mission_id],
        statuses: vec![JobStatus::Completed, JobStatus::Failed, JobStatus::Lost, JobStatus::Stopped],
        items: 1,
        ..Default::default()
    };
    loop {
        let page = client.list_jobs_page(&ended).await.unwrap();
        if page.total >= expected {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "jobs did not finish: {} of {expected}", page.total);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu_after = service.cpu_time();
    let requests_after = requests_by_route(&service.urls()).await;
    let failed = ListJobs {
        mission_ids: vec![mission.mission_id],
        statuses: vec![JobStatus::Failed],
        items: 1,
        ..Default::default()
    };
    assert_eq!(client.list_jobs_page(&failed).await.unwrap().total, 0, "no job may fail");
    let newest = client
        .list_jobs(&ListJobs { mission_ids: vec![mission.mission_id], items: 200, ..Default::default() })
        .await
        .unwrap();
    // The figures must be those of jobs under limits (or, asked for, of jobs without).
    let limits = newest[0].limits.clone().unwrap_or_default();
    if std::env::var_os("BENCH_NO_LIMITS").is_none() {
        assert!(limits.contains("enforced by cgroup"), "jobs ran without limits: {limits}");
    }
    let last_finish = newest.iter().filter_map(|j| j.finished_at).max().unwrap();
    let span = (last_finish - first_submit).to_std().unwrap();
    let rate = throughput_jobs as f64 / span.as_secs_f64();
    let floor_rate = throughput_jobs as f64 / floor.as_secs_f64();
    let cpu_per_job = (cpu_after - cpu_before) / throughput_jobs as u32;
    // Where a job's time goes: the mean gap between consecutive moves over the newest 100 jobs.
    let mut phases: BTreeMap<(JobStatus, JobStatus), (Duration, u32)> = BTreeMap::new();
    // And the hand-over of an LZ slot: from a job's end (as the LZ saw it) to the next assignment.
    let mut slot_events = Vec::new();
    for job in newest.iter().take(100) {
        let history = client.get_job(job.job_id).await.unwrap().history;
        for t in &history {
            match t.status {
                JobStatus::Assigned => slot_events.push((t.at, false)),
                s if s.is_final() => slot_events.push((t.at, true)),
                _ => {}
            }
        }
        for pair in history.windows(2) {
            let entry = phases.entry((pair[0].status, pair[1].status)).or_default();
            entry.0 += (pair[1].at - pair[0].at).to_std().unwrap_or_default();
            entry.1 += 1;
        }
    }

    slot_events.sort();
    let (mut freed, mut handovers) = (std::collections::VecDeque::new(), Vec::new());
    for (at, is_end) in slot_events {
        if is_end {
            freed.push_back(at);
        } else if let Some(end) = freed.pop_front() {
            handovers.push((at - end).to_std().unwrap_or_default());
        }
    }
    let handover = handovers.iter().sum::<Duration>() / handovers.len().max(1) as u32;

    // A job array: one request for all, its progress read until every element ended.
    let array_jobs = env_or("BENCH_ARRAY_JOBS", 10_000);
    let array = if array_jobs > 0 {
        let request = mission_client::RunJobArray {
            run: run.clone(),
            range: Some(format!("1-{array_jobs}")),
            ..Default::default()
        };
        let started = Instant::now();
        let array = client.run_job_array(mission.mission_id, &request).await.unwrap();
        let submitted_in = started.elapsed();
        let array = loop {
            let progress = client.get_job_array(array.array_id).await.unwrap();
            if progress.queued + progress.running == 0 {
                break progress;
            }
            assert!(started.elapsed() < Duration::from_secs(1200), "the array did not finish: {progress:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(array.completed as usize, array_jobs, "every element completes: {array:?}");
        Some((submitted_in, array_jobs as f64 / started.elapsed().as_secs_f64()))
    } else {
        None
    };

    // A separate agent's idle RSS.
    let lab = client
        .create_station(&mission_client::CreateStation { name: "rss".into(), ..Default::default() })
        .await
        .unwrap();
    let registered = client
        .register_landing_zone(lab.station_id, &RegisterLandingZone { name: "idle".into(), cluster_account: None })
        .await
        .unwrap();
    let agent = common::spawn_agent(&url, &registered.token, &home.path().join("lz"), &[]);
    while !client.list_landing_zones(lab.station_id).await.unwrap().iter().any(|lz| lz.online) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let agent_rss = rss_kib(agent.id().unwrap());

    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    println!("| measure ({}) | value | target |", deployment.label());
    println!("|---|---|---|");
    println!("| dispatch latency p50 ({latency_jobs} jobs) | {} | < 20 ms |", ms(percentile(&latencies, 0.5)));
    println!("| dispatch latency p99 | {} | < 100 ms |", ms(percentile(&latencies, 0.99)));
    println!("| dispatch latency max | {} | |", ms(*latencies.last().unwrap()));
    println!(
        "| {throughput_jobs} trivial jobs, first submit to last finish | {:.2} s = {rate:.0} jobs/s | ≥ 200 jobs/s |",
        span.as_secs_f64()
    );
    println!("| (submitting them took) | {:.2} s | |", submitted_in.as_secs_f64());
    println!(
        "| floor: seq {throughput_jobs} \\| xargs -P2 sh run.sh | {:.2} s = {floor_rate:.0} /s | |",
        floor.as_secs_f64()
    );
    println!("| jobs/s as a share of the floor | {:.0}% | ≥ 25% |", 100.0 * rate / floor_rate);
    println!("| server CPU per job (all replicas, incl. embedded LZ) | {} | |", ms(cpu_per_job));
    if let Some((submitted_in, array_rate)) = array {
        println!(
            "| {array_jobs}-element job array: jobs/s (submitted in {:.2} s) | {array_rate:.0} | |",
            submitted_in.as_secs_f64()
        );
        println!("| array jobs/s as a share of one-request-a-job jobs/s | {:.0}% | |", 100.0 * array_rate / rate);
    }
    println!("| the jobs' limits | {limits} | |");
    println!("| `mission lz` idle RSS | {:.1} MB | < 15 MB |", agent_rss as f64 / 1024.0);
    println!("| mean slot hand-over: a job ends → the next is assigned | {} | |", ms(handover));
    for (route, after) in &requests_after {
        let n = after - requests_before.get(route).copied().unwrap_or(0);
        if n >= throughput_jobs as u64 / 10 {
            println!("| HTTP requests per job: {route} | {:.2} | |", n as f64 / throughput_jobs as f64);
        }
    }
    for ((from, to), (total, n)) in phases {
        println!("| mean {from} → {to} (newest 100 jobs) | {} | |", ms(total / n));
    }
    drop(service);
}
