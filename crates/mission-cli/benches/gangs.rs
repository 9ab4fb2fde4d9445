//! Gangs (issue 54): how far apart a gang's nodes start, in one run on this machine.
//!
//! - Real agents: `mission server` and `BENCH_GANG_AGENTS` (default 3) `mission lz` agents on a
//!   station of their own, each with its node address in the loopback range (127.0.0.2, .3, …).
//!   For gangs of 2 and 3 nodes, `BENCH_GANG_RUNS` (default 10) each, one after another: every
//!   node's program prints the time it started (`date +%s.%N`), and the skew is the last start
//!   less the first, read from each node's log.
//! - Simulated agents: `BENCH_GANG_SIM_NODES` (default 8) agents speaking the landing-zone
//!   protocol by hand (no processes) on another station, and gangs of that many nodes: the skew
//!   is between the first and the last agent to receive its run order, as each would start its
//!   program then.
//!
//! Run: `cargo bench -p mission-cli --bench gangs`.

mod common;

use std::time::{Duration, Instant};

use mission_api::lz::{Order, Report};
use mission_client::{JobResources, JobStatus, LogStream, RegisterLandingZone, Resources};

use common::{SignedIn, percentile, shell_mission};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A line of p50 / p90 / max of `skews`.
fn report(what: &str, skews: &mut [Duration]) {
    skews.sort();
    println!(
        "| {what} | {} | {:.1} / {:.1} / {:.1} ms |",
        skews.len(),
        ms(percentile(skews, 0.5)),
        ms(percentile(skews, 0.9)),
        ms(*skews.last().expect("runs"))
    );
}

#[tokio::main]
async fn main() {
    let agents = env_or("BENCH_GANG_AGENTS", 3).max(3);
    let runs = env_or("BENCH_GANG_RUNS", 10);
    let simulated = env_or("BENCH_GANG_SIM_NODES", 8);
    let root = tempfile::tempdir().unwrap();
    let service = SignedIn::start_as(root.path(), "bench", "bench-password-1", true, &["--no-local-lz"]).await;
    let (client, url) = (&service.client, service.url.clone());
    println!("| gang | runs | start skew p50 / p90 / max |");
    println!("|---|---|---|");

    // Real agents, each on an address of its own.
    let create = mission_client::CreateStation { name: "hpc".into(), ..Default::default() };
    let station = client.create_station(&create).await.unwrap().station_id;
    let mut children = Vec::new();
    for n in 0..agents {
        let registered = RegisterLandingZone { name: format!("node{n}"), cluster_account: None };
        let registered = client.register_landing_zone(station, &registered).await.unwrap();
        let address = format!("127.0.0.{}", n + 2);
        let flags = ["--lz-cpus", "2", "--node-address", &address];
        children.push(common::spawn_agent(&url, &registered.token, &root.path().join(format!("node{n}")), &flags));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.list_landing_zones(station).await.unwrap().iter().filter(|lz| lz.online).count() < agents {
        assert!(Instant::now() < deadline, "the landing zones did not come online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let src = root.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "date +%s.%N\n").unwrap();
    let mission = shell_mission(client, "started-at", &src).await;
    for nodes in [2u32, 3] {
        let mut skews = Vec::new();
        // The first run of each size warms the nodes' work dirs and caches, and is not counted.
        for run in 0..=runs {
            let asked = JobResources { cpu_count: Some(1), nodes: Some(nodes), ..Default::default() };
            let job = client.run_job_on_station(mission.mission_id, station, asked).await.unwrap();
            let done = client.wait_for_job(job.job_id).await.unwrap();
            assert_eq!(done.status, JobStatus::Completed, "{done:?}");
            let mut starts = Vec::new();
            for node in 0..nodes {
                let out = client.node_logs(job.job_id, node, LogStream::Stdout).await.unwrap();
                starts.push(out.trim().parse::<f64>().unwrap_or_else(|_| panic!("node {node} printed {out:?}")));
            }
            let first = starts.iter().copied().fold(f64::INFINITY, f64::min);
            let last = starts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if run > 0 {
                skews.push(Duration::from_secs_f64(last - first));
            }
        }
        report(&format!("{nodes} nodes, real agents (program start)"), &mut skews);
    }
    drop(children);

    // Simulated agents: run orders received, as each would start its program then.
    let create = mission_client::CreateStation { name: "simulated".into(), ..Default::default() };
    let station = client.create_station(&create).await.unwrap().station_id;
    let mut fakes = Vec::new();
    for n in 0..simulated {
        let registered = RegisterLandingZone { name: format!("sim{n}"), cluster_account: None };
        let token = client.register_landing_zone(station, &registered).await.unwrap().token;
        let resources = Resources { cpu_count: 2, memory_amount: 4096, gpu_count: 0 };
        fakes.push(mission_testkit::FakeAgent::connect(&url, &token, resources).await);
    }
    let mut skews = Vec::new();
    for _ in 0..runs {
        let asked = JobResources { cpu_count: Some(1), nodes: Some(simulated as u32), ..Default::default() };
        let job = client.run_job_on_station(mission.mission_id, station, asked).await.unwrap();
        let received = futures_util::future::join_all(fakes.iter_mut().map(|fake| async {
            match fake.next_order().await {
                Order::Run(assignment) if assignment.job_id == job.job_id => Instant::now(),
                other => panic!("a run order for the gang, not {other:?}"),
            }
        }))
        .await;
        // Every node ends: the gang with them.
        for fake in &fakes {
            fake.report(&[Report {
                exit_code: Some(0),
                ..Report::new(job.job_id, JobStatus::Completed, mission_store::now())
            }])
            .await;
        }
        let done = client.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        let (first, last) = (received.iter().min().unwrap(), received.iter().max().unwrap());
        skews.push(*last - *first);
    }
    report(&format!("{simulated} nodes, simulated agents (run order received)"), &mut skews);
}
