//! Two projects contending for one station, traced: the share of the station's CPUs each holds,
//! second by second, drawn as a chart (`target/fairness.svg`, the numbers beside it in
//! `target/fairness.csv`).
//!
//! The real `Scheduler` in this process (its task, its queue, its writes to a SQLite store) with
//! fair-share order; agents are simulated here. `BENCH_FAIR_LZS` landing zones of 4 CPUs
//! (default 8: 32 CPUs). Project bio queues 5,000 one-CPU jobs at once; `BENCH_FAIR_JOIN`
//! seconds later (default 10) project astro queues 2,000. Each job runs 0.5 to 2 s (spread
//! evenly, the same for every run) under a time limit of a minute. The trace runs
//! `BENCH_SECONDS` (default 60). Equal shares unless `BENCH_FAIR_ASTRO_SHARE` gives astro another.
//!
//! Run: `cargo bench -p mission-cli --bench fairness`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mission_api::lz::{Hello, Order, Report};
use mission_api::{Job, JobStatus, ProjectLimits, Resources};
use mission_server::DEFAULT_STATION_ID;
use mission_server::agent_tokens::AgentTokens;
use mission_server::job_logs::JobLogs;
use mission_server::scheduler::{Policy, QueueOrder, Scheduler};
use mission_store::{LzIdentity, now, test_support};
use uuid::Uuid;

const CPUS_PER_LZ: u32 = 4;
const PROJECTS: [&str; 2] = ["bio", "astro"];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// How long the `n`th job runs: 0.5 to 2 s, spread evenly by a fixed permutation.
fn run_time(n: usize) -> Duration {
    Duration::from_millis(500 + (n as u64 * 7919) % 1500)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let lzs = env_or("BENCH_FAIR_LZS", 8);
    let join = Duration::from_secs(env_or("BENCH_FAIR_JOIN", 10) as u64);
    let seconds = env_or("BENCH_SECONDS", 60);
    let astro_share: Option<f64> = std::env::var("BENCH_FAIR_ASTRO_SHARE").ok().map(|s| s.parse().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let (store, owner) = test_support::store_with_user(dir.path()).await;
    let mission = test_support::mission(owner.user_id, "contention");
    store.insert_mission(&mission).await.unwrap();
    let mut members = Vec::new();
    for name in PROJECTS {
        let project_id = Uuid::new_v4();
        store.insert_project(project_id, name, "", now()).await.unwrap();
        members.push((test_support::add_user(&store, &format!("{name}-user")).await.user_id, project_id));
    }
    if let Some(share) = astro_share {
        let limits = ProjectLimits { share: Some(share), ..Default::default() };
        store.set_project_limits(members[1].1, DEFAULT_STATION_ID, &limits, now()).await.unwrap();
    }
    let logs = Arc::new(JobLogs::new(dir.path().join("logs")).unwrap());
    let tokens = Arc::new(AgentTokens::new(store.clone()));
    let policy = Policy {
        lease: Duration::from_secs(3600),
        max_running_per_user: None,
        order: QueueOrder::DEFAULT,
        reclaim_grace: Policy::DEFAULT_RECLAIM_GRACE,
    };
    let tasks = tokio_util::task::TaskTracker::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let scheduler = Scheduler::start(store.clone(), logs, tokens, policy, &tasks, shutdown.clone()).await.unwrap();

    // Which project each job is charged to, and how many CPUs each project holds now.
    let charged: Arc<Mutex<HashMap<Uuid, (usize, usize)>>> = Arc::default();
    let held: Arc<[AtomicI64; 2]> = Arc::new([AtomicI64::new(0), AtomicI64::new(0)]);
    for i in 0..lzs {
        let name = format!("lz-{i}");
        let lz_id = store.rotate_lz_token(DEFAULT_STATION_ID, &name, &format!("hash {i}"), now()).await.unwrap();
        let identity = LzIdentity { lz_id, station_id: DEFAULT_STATION_ID, name, cluster_account: None };
        scheduler.registered(identity.clone());
        let hello = Hello::plain(Resources { cpu_count: CPUS_PER_LZ, memory_amount: 16_384, gpu_count: 0 }, "bench");
        let mut session = scheduler.connect(identity.clone(), hello).await.unwrap();
        let (scheduler, charged, held) = (scheduler.clone(), charged.clone(), held.clone());
        // The agent: each job it is told to run ends after its run time.
        tokio::spawn(async move {
            while let Some(order) = session.orders.recv().await {
                let Order::Run(job) = order else { continue };
                let Some((project, n)) = charged.lock().unwrap().get(&job.job_id).copied() else { continue };
                held[project].fetch_add(1, Ordering::Relaxed);
                let (scheduler, identity, held) = (scheduler.clone(), identity.clone(), held.clone());
                tokio::spawn(async move {
                    let started = now();
                    scheduler
                        .reports(identity.clone(), vec![Report::new(job.job_id, JobStatus::Running, started)])
                        .await
                        .unwrap();
                    tokio::time::sleep(run_time(n)).await;
                    held[project].fetch_sub(1, Ordering::Relaxed);
                    let end = Report { exit_code: Some(0), ..Report::new(job.job_id, JobStatus::Completed, now()) };
                    scheduler.reports(identity, vec![end]).await.unwrap();
                });
            }
        });
    }
    let capacity = lzs as u32 * CPUS_PER_LZ;

    let submit = |project: usize, count: usize, first: usize| {
        let (scheduler, charged, mission_id) = (scheduler.clone(), charged.clone(), mission.mission_id);
        let (user_id, project_id) = members[project];
        async move {
            let jobs: Vec<Job> = (0..count)
                .map(|_| Job {
                    cpu_count: 1,
                    memory_amount: 256,
                    time_limit: Some(1),
                    project_id,
                    ..Job::queued(mission_id, user_id, DEFAULT_STATION_ID, vec!["true".into()], now())
                })
                .collect();
            charged.lock().unwrap().extend(jobs.iter().enumerate().map(|(k, job)| (job.job_id, (project, first + k))));
            for chunk in jobs.chunks(1000) {
                scheduler.submit_many(chunk.to_vec()).await.unwrap();
            }
        }
    };

    // A sample every 100 ms: what each project holds.
    let started = Instant::now();
    let sampler = {
        let held = held.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut ticks = tokio::time::interval(Duration::from_millis(100));
            while started.elapsed() < Duration::from_secs(seconds as u64) {
                ticks.tick().await;
                samples.push((started.elapsed(), held[0].load(Ordering::Relaxed), held[1].load(Ordering::Relaxed)));
            }
            samples
        })
    };
    submit(0, 5_000, 0).await;
    tokio::time::sleep(join.saturating_sub(started.elapsed())).await;
    submit(1, 2_000, 5_000).await;
    let samples = sampler.await.unwrap();
    shutdown.cancel();

    // Per second: the mean CPUs each project held.
    let mut per_second = vec![(0.0, 0.0, 0u32); seconds];
    for (at, bio, astro) in &samples {
        let s = (at.as_secs() as usize).min(seconds - 1);
        per_second[s].0 += *bio as f64;
        per_second[s].1 += *astro as f64;
        per_second[s].2 += 1;
    }
    let per_second: Vec<(f64, f64)> =
        per_second.iter().map(|(b, a, n)| (*b / f64::from((*n).max(1)), *a / f64::from((*n).max(1)))).collect();
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&out).unwrap();
    let mut csv = String::from("second,bio_cpus,astro_cpus,capacity\n");
    for (s, (bio, astro)) in per_second.iter().enumerate() {
        writeln!(csv, "{s},{bio:.2},{astro:.2},{capacity}").unwrap();
    }
    std::fs::write(out.join("fairness.csv"), &csv).unwrap();
    std::fs::write(out.join("fairness.svg"), chart(&per_second, capacity, join, astro_share)).unwrap();

    let mean = |from: usize, to: usize, pick: fn(&(f64, f64)) -> f64| {
        let window = &per_second[from.min(seconds)..to.min(seconds)];
        window.iter().map(pick).sum::<f64>() / window.len().max(1) as f64
    };
    let joined = join.as_secs() as usize;
    println!("| measure | bio | astro |");
    println!("|---|---|---|");
    println!(
        "| mean CPUs held before astro joins (0–{joined} s) of {capacity} | {:.1} | {:.1} |",
        mean(0, joined, |s| s.0),
        mean(0, joined, |s| s.1)
    );
    println!(
        "| mean CPUs held the 10 s after it joins | {:.1} | {:.1} |",
        mean(joined, joined + 10, |s| s.0),
        mean(joined, joined + 10, |s| s.1)
    );
    println!(
        "| mean CPUs held from then to the end ({}–{seconds} s) | {:.1} | {:.1} |",
        joined + 10,
        mean(joined + 10, seconds, |s| s.0),
        mean(joined + 10, seconds, |s| s.1)
    );
    println!("chart: {}, numbers: {}", out.join("fairness.svg").display(), out.join("fairness.csv").display());
}

/// The CPUs each project held per second, stacked, as an SVG chart.
fn chart(per_second: &[(f64, f64)], capacity: u32, join: Duration, astro_share: Option<f64>) -> String {
    let (width, height, left, top) = (760.0, 360.0, 60.0, 40.0);
    let (plot_w, plot_h) = (width - left - 30.0, height - top - 50.0);
    let x = |s: f64| left + s / per_second.len() as f64 * plot_w;
    let y = |cpus: f64| top + plot_h - cpus / f64::from(capacity) * plot_h;
    let area = |lower: &dyn Fn(&(f64, f64)) -> f64, upper: &dyn Fn(&(f64, f64)) -> f64| {
        let mut d = String::new();
        for (s, sample) in per_second.iter().enumerate() {
            for at in [s as f64, s as f64 + 1.0] {
                let _ = write!(d, "{}{:.1},{:.1} ", if d.is_empty() { "M" } else { "L" }, x(at), y(upper(sample)));
            }
        }
        for (s, sample) in per_second.iter().enumerate().rev() {
            for at in [s as f64 + 1.0, s as f64] {
                let _ = write!(d, "L{:.1},{:.1} ", x(at), y(lower(sample)));
            }
        }
        d + "Z"
    };
    let bio = area(&|_| 0.0, &|s| s.0);
    let astro = area(&|s| s.0, &|s| s.0 + s.1);
    let share = astro_share.map_or("equal shares".to_owned(), |s| format!("astro's share {s}"));
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{left}" y="20" font-size="14">CPUs held per second on a {capacity}-CPU station, fair-share, {share}</text>
<path d="{bio}" fill="#4e79a7"/>
<path d="{astro}" fill="#f28e2b"/>
<line x1="{jx:.1}" y1="{top}" x2="{jx:.1}" y2="{bottom:.1}" stroke="black" stroke-dasharray="4 3"/>
<text x="{jx_text:.1}" y="{label_y:.1}">astro queues</text>
<line x1="{left}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}" stroke="black"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom:.1}" stroke="black"/>
"##,
        jx = x(join.as_secs_f64()),
        jx_text = x(join.as_secs_f64()) + 4.0,
        label_y = top + 14.0,
        bottom = top + plot_h,
        right = left + plot_w,
    );
    for tick in (0..=per_second.len()).step_by(10) {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{tick} s</text>"#,
            x(tick as f64),
            top + plot_h + 18.0
        );
    }
    for tick in [0, capacity / 2, capacity] {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{tick}</text>"#,
            left - 6.0,
            y(f64::from(tick)) + 4.0
        );
    }
    let legend_y = height - 12.0;
    let _ = writeln!(
        svg,
        r##"<rect x="{left}" y="{:.1}" width="12" height="12" fill="#4e79a7"/><text x="{:.1}" y="{legend_y:.1}">bio (queued 5,000 at 0 s)</text>
<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="#f28e2b"/><text x="{:.1}" y="{legend_y:.1}">astro (queued 2,000 later)</text>
</svg>"##,
        legend_y - 10.0,
        left + 18.0,
        left + 240.0,
        legend_y - 10.0,
        left + 258.0
    );
    svg
}
