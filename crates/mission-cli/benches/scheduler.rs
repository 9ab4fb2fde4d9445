//! The scheduler's state machine alone, in this process, at organisation scale: no HTTP, no
//! agents, the real `Scheduler` (its task, its queue, its batch writes to a SQLite store).
//!
//! - `BENCH_SIM_LZS` (default 10,000) landing zones of mixed sizes (1 to 16 CPUs) connect;
//! - jobs of 1, 1 and 2 CPUs in turn (`BENCH_SIM_JOB_CPUS`, default `1,1,2`) are submitted 5,000
//!   at a time (as an array is) until the fleet is full and `BENCH_SIM_JOBS` (default 1,000,000)
//!   more wait in the queue;
//! - then, for `BENCH_SECONDS` (default 10), one running job ends every millisecond (1,000/s,
//!   on each landing zone in turn). Measured:
//!   - the scheduler's reaction, p50/p99/max: from an end being reported to the answer, which
//!     comes once the batch holding the end is written, right after that batch's orders are sent;
//!     the pass that placed jobs in the room freed (or held it for a larger one) is in that batch;
//!   - from an end to the next run order on the LZ it freed, p50/p99/max: the reaction, plus the
//!     time the room stays held for a larger job at the head of the line (a reservation) where
//!     it is. An end after which nothing starts there within 2 s is counted apart;
//!   - the run orders on any LZ in that time (best fit may put the next job on another LZ than
//!     the one that freed room), and the process's CPU per run order (the driver's own share
//!     included, so an upper bound for the pass).
//!
//! With `BENCH_SIM_GANG_PERCENT` (default 0; issue 54 asks 10) that share of the jobs are gangs
//! of 2 to 16 nodes (taken in turn) of one CPU each: a gang's parts end one by one, as its nodes
//! report, and it leaves once all have. Before filling the fleet, a first phase prices a gang's
//! placement against the same number of single jobs: `BENCH_SIM_GANG_COST` (default 200) gangs
//! of 8 nodes, one at a time from submission to every order sent, then as many times 8 single
//! jobs, one at a time, on the idle fleet (each ended again before the next).
//!
//! The jobs belong to `BENCH_SIM_USERS` users (default 1) in `BENCH_SIM_PROJECTS` projects
//! (default 1), taken in turn, ordered by `BENCH_SIM_ORDER` (`fair-share`, the server's default,
//! or `first-come`): fair-share's cost is what a pass pays to rank projects and users by usage,
//! and it shows against one project and user, or against first come, first served.
//!
//! With a million queued, a job submitted now waits for the million before it by design; what
//! the queue's length could slow down is the pass that fills freed room, and that is what the
//! reaction measures. Run: `cargo bench -p mission-cli --bench scheduler`.

mod common;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mission_api::lz::{Hello, Order, Report};
use mission_api::{Job, JobStatus, Resources};
use mission_server::DEFAULT_STATION_ID;
use mission_server::agent_tokens::AgentTokens;
use mission_server::job_logs::JobLogs;
use mission_server::scheduler::{Policy, QueueOrder, Scheduler, Session};
use mission_store::{LzIdentity, now, test_support};
use tokio::sync::Mutex;

use common::{cpu_time, percentile};

/// Landing-zone sizes, in CPUs, taken in turn.
const LZ_CPUS: [u32; 5] = [1, 2, 4, 8, 16];
const SUBMIT_CHUNK: usize = 5_000;
/// An end after which no job starts on the freed room within this long placed nothing: the
/// room is kept for a larger job at the head of the line (a reservation), as it should be.
const NOTHING_PLACED: Duration = Duration::from_secs(2);

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A connected landing zone: who it is, its order stream, the jobs it runs (oldest first).
struct Lz {
    identity: LzIdentity,
    session: Session,
    running: VecDeque<uuid::Uuid>,
}

impl Lz {
    /// Takes the run orders already sent.
    fn take_orders(&mut self) {
        while let Ok(order) = self.session.orders.try_recv() {
            if let Order::Run(job) = order {
                self.running.push_back(job.job_id);
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let lzs = env_or("BENCH_SIM_LZS", 10_000);
    let queued = env_or("BENCH_SIM_JOBS", 1_000_000);
    let seconds = env_or("BENCH_SECONDS", 10);
    // Job sizes in CPUs, taken in turn.
    let job_cpus: Vec<u32> = std::env::var("BENCH_SIM_JOB_CPUS")
        .unwrap_or_else(|_| "1,1,2".into())
        .split(',')
        .map(|n| n.trim().parse().expect("BENCH_SIM_JOB_CPUS: CPUs, comma-separated"))
        .collect();
    let order = match std::env::var("BENCH_SIM_ORDER").as_deref() {
        Ok("first-come") => QueueOrder::FirstCome,
        Ok("fair-share") | Err(_) => QueueOrder::DEFAULT,
        Ok(other) => panic!("BENCH_SIM_ORDER: fair-share or first-come, not {other:?}"),
    };
    let (projects, users) = (env_or("BENCH_SIM_PROJECTS", 1).max(1), env_or("BENCH_SIM_USERS", 1).max(1));
    let gang_percent = env_or("BENCH_SIM_GANG_PERCENT", 0).min(100);
    let gang_cost_runs = env_or("BENCH_SIM_GANG_COST", 200);
    let dir = tempfile::tempdir().unwrap();
    let (store, user) = test_support::store_with_user(dir.path()).await;
    let mission = test_support::mission(user.user_id, "sweep");
    store.insert_mission(&mission).await.unwrap();
    // Who submits: (user, project) in turn; with one of each, the mission's owner and their
    // personal project.
    let mut owners = vec![(user.user_id, user.user_id)];
    if projects > 1 || users > 1 {
        let mut project_ids = Vec::new();
        for p in 0..projects {
            let project_id = uuid::Uuid::new_v4();
            store.insert_project(project_id, &format!("project-{p}"), "", now()).await.unwrap();
            project_ids.push(project_id);
        }
        owners.clear();
        for u in 0..users {
            let member = test_support::add_user(&store, &format!("user-{u}")).await;
            owners.push((member.user_id, project_ids[u % projects]));
        }
    }
    let logs = Arc::new(JobLogs::new(dir.path().join("logs")).unwrap());
    let tokens = Arc::new(AgentTokens::new(store.clone()));
    let policy = Policy {
        lease: Duration::from_secs(3600),
        max_running_per_user: None,
        order,
        reclaim_grace: Policy::DEFAULT_RECLAIM_GRACE,
    };
    let tasks = tokio_util::task::TaskTracker::new();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let scheduler = Scheduler::start(store.clone(), logs, tokens, policy, &tasks, shutdown.clone()).await.unwrap();

    let started = Instant::now();
    let mut fleet = Vec::with_capacity(lzs);
    let mut capacity = 0usize;
    for i in 0..lzs {
        let name = format!("lz-{i}");
        let lz_id = store.rotate_lz_token(DEFAULT_STATION_ID, &name, &format!("hash {i}"), now()).await.unwrap();
        let identity = LzIdentity { lz_id, station_id: DEFAULT_STATION_ID, name, cluster_account: None };
        scheduler.registered(identity.clone());
        let cpus = LZ_CPUS[i % LZ_CPUS.len()];
        capacity += cpus as usize;
        let resources = Resources { cpu_count: cpus, memory_amount: u64::from(cpus) * 1024, gpu_count: 0 };
        let hello = Hello::plain(resources, "bench");
        let session = scheduler.connect(identity.clone(), hello).await.unwrap();
        fleet.push(Lz { identity, session, running: VecDeque::new() });
    }
    let connected = started.elapsed();

    // A gang's placement against its nodes' number of single jobs, on the idle fleet.
    let one_job = |nodes: u32| Job {
        cpu_count: 1,
        memory_amount: 512,
        gang: (nodes > 1).then(|| mission_api::JobGang { nodes, launch: Default::default(), lz_ids: Vec::new() }),
        ..Job::queued(mission.mission_id, user.user_id, DEFAULT_STATION_ID, vec!["true".into()], now())
    };
    let (mut gang_placed, mut singles_placed) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..gang_cost_runs {
        for (nodes, jobs, spent) in [(8u32, 1, &mut gang_placed), (1, 8, &mut singles_placed)] {
            let mut placed = Vec::new();
            let started = Instant::now();
            for _ in 0..jobs {
                placed.push(scheduler.submit(one_job(nodes)).await.unwrap().job_id);
            }
            *spent += started.elapsed();
            // Every part ends on the LZ it went to, and the fleet is idle again.
            for lz in &mut fleet {
                while let Ok(order) = lz.session.orders.try_recv() {
                    if let Order::Run(job) = order {
                        let done =
                            Report { exit_code: Some(0), ..Report::new(job.job_id, JobStatus::Completed, now()) };
                        scheduler.reports(lz.identity.clone(), vec![done]).await.unwrap();
                    }
                }
            }
            assert_eq!(placed.len(), jobs);
        }
    }

    // Enough to fill every CPU (each job takes at least one) and leave `queued` waiting.
    let started = Instant::now();
    let total = capacity + queued;
    let mut submitted = 0;
    while submitted < total {
        let n = SUBMIT_CHUNK.min(total - submitted);
        let jobs = (submitted..submitted + n)
            .map(|i| {
                let (user_id, project_id) = owners[i % owners.len()];
                // Every (100 / gang_percent)th job a gang of 2 to 16 nodes of one CPU, in turn.
                let gang = (gang_percent > 0 && i % (100 / gang_percent) == 0).then(|| mission_api::JobGang {
                    nodes: 2 + (i / (100 / gang_percent) % 15) as u32,
                    launch: Default::default(),
                    lz_ids: Vec::new(),
                });
                Job {
                    cpu_count: if gang.is_some() { 1 } else { job_cpus[i % job_cpus.len()] },
                    memory_amount: 512,
                    project_id,
                    gang,
                    ..Job::queued(mission.mission_id, user_id, DEFAULT_STATION_ID, vec!["true".into()], now())
                }
            })
            .collect();
        scheduler.submit_many(jobs).await.unwrap();
        submitted += n;
    }
    let submission = started.elapsed();
    for lz in &mut fleet {
        lz.take_orders();
    }
    let running: usize = fleet.iter().map(|lz| lz.running.len()).sum();
    let waiting = total - running;

    // The steady state: an end every millisecond, each on the next landing zone.
    let fleet: Arc<Vec<Mutex<Lz>>> = Arc::new(fleet.into_iter().map(Mutex::new).collect());
    let ended = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ends = seconds * 1_000;
    let cpu_before = cpu_time(std::process::id()).unwrap();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut waits = Vec::with_capacity(ends);
    for k in 0..ends {
        ticks.tick().await;
        let (fleet, scheduler, ended_count) = (fleet.clone(), scheduler.clone(), ended.clone());
        waits.push(tokio::spawn(async move {
            let mut lz = fleet[k % fleet.len()].lock().await;
            lz.take_orders();
            let job_id = lz.running.pop_front()?;
            ended_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let at = now();
            let reports = vec![
                Report::new(job_id, JobStatus::Running, at),
                Report { exit_code: Some(0), ..Report::new(job_id, JobStatus::Completed, at) },
            ];
            let ended = Instant::now();
            scheduler.reports(lz.identity.clone(), reports).await.unwrap();
            // The scheduler answers a report once the batch that holds it is written, right
            // after sending that batch's orders: its pass's decisions on the room freed.
            let decided = ended.elapsed();
            loop {
                match tokio::time::timeout(NOTHING_PLACED, lz.session.orders.recv()).await {
                    Ok(Some(Order::Run(job))) => {
                        lz.running.push_back(job.job_id);
                        return Some((decided, Some(ended.elapsed())));
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => return Some((decided, None)),
                }
            }
        }));
    }
    let sending = started.elapsed();
    let mut latencies = Vec::with_capacity(ends);
    let mut decisions = Vec::with_capacity(ends);
    for wait in waits {
        if let Some((decided, latency)) = wait.await.unwrap() {
            decisions.push(decided);
            latencies.extend(latency);
        }
    }
    decisions.sort();
    let cpu = cpu_time(std::process::id()).unwrap().saturating_sub(cpu_before);
    latencies.sort();
    // Every run order of the phase, on whichever LZ best fit chose: each end took one job off
    // the running, each order put one on.
    let mut running_after = 0;
    for lz in fleet.iter() {
        let mut lz = lz.lock().await;
        lz.take_orders();
        running_after += lz.running.len();
    }
    let orders = running_after + ended.load(std::sync::atomic::Ordering::Relaxed) - running;
    shutdown.cancel();

    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!("| measure | value | target |");
    println!("|---|---|---|");
    println!("| order; who submits | {order:?}; {users} users in {projects} projects, in turn | |");
    if gang_cost_runs > 0 {
        let per = |spent: Duration| ms(spent / gang_cost_runs as u32);
        println!(
            "| a gang of 8 nodes, submission → its 8 orders sent, against 8 single jobs one after another ({gang_cost_runs} of each, idle fleet) | {} per gang, {} per 8 singles | |",
            per(gang_placed),
            per(singles_placed)
        );
    }
    println!("| share of the jobs that are gangs of 2-16 nodes | {gang_percent}% | |");
    println!("| landing zones connected | {lzs} ({capacity} CPUs) in {} | |", ms(connected));
    println!(
        "| jobs submitted in writes of {SUBMIT_CHUNK} | {total} in {:.1} s: {running} placed, {waiting} queued | |",
        submission.as_secs_f64()
    );
    println!(
        "| ends at 1,000/s for {seconds} s: the next job placed | {} of {ends}, the ends sent in {:.1} s ({:.0} placed/s) | |",
        latencies.len(),
        sending.as_secs_f64(),
        latencies.len() as f64 / sending.as_secs_f64()
    );
    println!(
        "| ends after which the room was kept for a larger job (nothing placed in {NOTHING_PLACED:?}) | {} | |",
        ends - latencies.len()
    );
    println!(
        "| end reported → the pass's decisions on its room written and their orders sent, p50 / p99 / max | {} / {} / {} | p99 < 50 ms |",
        ms(percentile(&decisions, 0.5)),
        ms(percentile(&decisions, 0.99)),
        ms(*decisions.last().unwrap())
    );
    println!(
        "| end reported → next run order on the LZ it freed (room kept for a larger job waits longer), p50 / p99 / max | {} / {} / {} | |",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap())
    );
    println!(
        "| run orders on any LZ in the phase (best fit may choose another LZ than the one that freed room) | {orders} ({:.0}/s) | |",
        orders as f64 / sending.as_secs_f64()
    );
    println!("| process CPU per run order (scheduler, store, driver) | {} | |", ms(cpu / orders.max(1) as u32));
}
