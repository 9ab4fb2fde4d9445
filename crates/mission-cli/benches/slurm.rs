//! Slurm benchmark (issue 16), on the one-node Slurm of `scripts/slurm-test-cluster.sh`, all in
//! one run: the same number of trivial one-CPU jobs (`BENCH_SLURM_JOBS`, 200)
//!
//! - with plain `sbatch --wrap` in a loop (the baseline: what a user's script does), waiting for
//!   the last with `squeue` every 100 ms;
//! - through our API with the Slurm runner (`mission lz --runner slurm`): one Slurm job each;
//! - through our API with pilots (`--pilots --max-pilots 2`, one CPU each).
//!
//! For each: first submission to last completion, jobs per second, dispatch latency (submission
//! to the program starting) p50 and p99, and for ours the `squeue`/`sacct` calls per minute (the
//! agent runs them through counting wrappers on its PATH).
//!
//! Run (as root, with Slurm installed by `scripts/install-test-deps.sh`):
//! `cargo bench -p mission-cli --bench slurm`. `MISSION_TEST_SLURM_CONF` names a running test
//! cluster; otherwise the benchmark starts one in a temporary dir (and stops it after).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use mission_client::{Client, CreateMission, JobResources, RegisterLandingZone, Uuid};

use common::{SlurmCluster, bin, percentile, spawn_server_with};

/// One way of running the jobs, measured.
struct Measured {
    name: &'static str,
    makespan: Duration,
    latencies: Vec<Duration>,
    /// `squeue` and `sacct` calls per minute, for ours.
    polls: Option<(f64, f64)>,
}

impl Measured {
    fn print(&self, jobs: usize, baseline: Option<&Measured>) {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let secs = self.makespan.as_secs_f64();
        print!(
            "{:<22} {:>8.2} s  {:>7.1} jobs/s  dispatch p50 {:>8.1} ms  p99 {:>8.1} ms",
            self.name,
            secs,
            jobs as f64 / secs,
            percentile(&sorted, 0.50).as_secs_f64() * 1e3,
            percentile(&sorted, 0.99).as_secs_f64() * 1e3,
        );
        if let Some(base) = baseline {
            print!("  {:+.1}% vs sbatch", (secs / base.makespan.as_secs_f64() - 1.0) * 100.0);
        }
        if let Some((squeue, sacct)) = self.polls {
            print!("  squeue {squeue:.1}/min  sacct {sacct:.1}/min");
        }
        println!();
    }
}

/// The baseline: `sbatch --wrap` per job, each job writing when it started.
fn plain_sbatch(cluster: &SlurmCluster, jobs: usize, dir: &Path) -> Measured {
    let started = Instant::now();
    let mut submitted = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let at = SystemTime::now();
        let out = cluster
            .command("sbatch")
            .args(["--parsable", "--cpus-per-task=1", "--mem=64M", "--output=/dev/null", "--job-name=bench-sbatch"])
            .arg(format!("--chdir={}", dir.display()))
            .arg("--wrap=date +%s.%N > start.$SLURM_JOB_ID")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        submitted.push((String::from_utf8(out.stdout).unwrap().trim().to_owned(), at));
    }
    let ids: Vec<&str> = submitted.iter().map(|(id, _)| id.as_str()).collect();
    loop {
        let out = cluster.command("squeue").args(["-h", "-t", "PD,R,CG", "-o", "%i", "-j", &ids.join(",")]).output();
        if out.unwrap().stdout.iter().all(u8::is_ascii_whitespace) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let makespan = started.elapsed();
    let latencies = submitted
        .iter()
        .map(|(id, at)| {
            let text = std::fs::read_to_string(dir.join(format!("start.{id}"))).unwrap();
            let start = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(text.trim().parse().unwrap());
            start.duration_since(*at).unwrap_or_default()
        })
        .collect();
    Measured { name: "sbatch --wrap loop", makespan, latencies, polls: None }
}

/// Wrappers of `squeue` and `sacct` that count their calls (in `counts/`), first on a PATH.
fn counting_wrappers(dir: &Path) -> PathBuf {
    let bin_dir = dir.join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    for program in ["squeue", "sacct"] {
        let real =
            String::from_utf8(std::process::Command::new("which").arg(program).output().unwrap().stdout).unwrap();
        let script = format!("#!/bin/sh\necho >> {}/{program}.count\nexec {} \"$@\"\n", dir.display(), real.trim());
        let path = bin_dir.join(program);
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin_dir
}

fn calls(dir: &Path, program: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{program}.count"))).map(|s| s.lines().count()).unwrap_or(0)
}

/// Our API with a Slurm landing zone whose agent runs with `flags`.
#[allow(clippy::too_many_arguments)]
async fn through_our_api(
    name: &'static str,
    cluster: &SlurmCluster,
    client: &Client,
    station: Uuid,
    mission: Uuid,
    jobs: usize,
    home: &Path,
    flags: &[&str],
) -> Measured {
    let account = String::from_utf8(std::process::Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    let lz_name = name.replace(' ', "-");
    let request = RegisterLandingZone { name: lz_name.clone(), cluster_account: Some(account.trim().to_owned()) };
    let registered = client.register_landing_zone(station, &request).await.unwrap();
    let dir = home.join(&lz_name);
    std::fs::create_dir_all(&dir).unwrap();
    let wrappers = counting_wrappers(&dir);
    let path = format!("{}:{}", wrappers.display(), std::env::var("PATH").unwrap_or_default());
    let mut agent = tokio::process::Command::new(bin())
        .args(["lz", "--server", &client.base_urls(), "--runner", "slurm", "--max-jobs", "1000"])
        .arg("--work-root")
        .arg(dir.join("work"))
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(flags)
        .env("MISSION_LZ_TOKEN", &registered.token)
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", path)
        .env("MISSION_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !client
        .list_landing_zones(station)
        .await
        .unwrap()
        .iter()
        .any(|lz| lz.lz_id == registered.landing_zone.lz_id && lz.online)
    {
        assert!(Instant::now() < deadline, "the {name} agent did not come online");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let one_cpu = JobResources { cpu_count: Some(1), memory_amount: Some(64), ..Default::default() };
    let (squeue_before, sacct_before) = (calls(&dir, "squeue"), calls(&dir, "sacct"));
    let started = Instant::now();
    let mut ids = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        ids.push(client.run_job_on_station(mission, station, one_cpu).await.unwrap().job_id);
    }
    let mut latencies = Vec::with_capacity(jobs);
    let (mut first, mut last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) = (None, None);
    for id in ids {
        let job = client.wait_for_job(id).await.unwrap();
        assert_eq!(job.status, mission_client::JobStatus::Completed, "{job:?}");
        let started_at = job.started_at.expect("it ran");
        latencies.push((started_at - job.created_at).to_std().unwrap_or_default());
        first = Some(first.map_or(job.created_at, |f| f.min(job.created_at)));
        last = Some(last.map_or(job.finished_at.unwrap(), |l| l.max(job.finished_at.unwrap())));
    }
    let elapsed_minutes = started.elapsed().as_secs_f64() / 60.0;
    let polls = (
        (calls(&dir, "squeue") - squeue_before) as f64 / elapsed_minutes,
        (calls(&dir, "sacct") - sacct_before) as f64 / elapsed_minutes,
    );
    agent.kill().await.unwrap();
    let makespan = (last.unwrap() - first.unwrap()).to_std().unwrap();
    Measured { name, makespan, latencies, polls: Some(polls) }
}

#[tokio::main]
async fn main() {
    let jobs: usize = std::env::var("BENCH_SLURM_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let cluster = SlurmCluster::up();
    let home = tempfile::tempdir().unwrap();
    let (_server, url) = spawn_server_with(&home.path().join("data"), &["--no-local-lz"]).await;
    let password = std::fs::read_to_string(home.path().join("data/initial-admin-password")).unwrap();
    let (tokens, auth) = common::sign_in(&url, "admin", password.trim()).await;
    let client = Client::with_tokens(&url, tokens, auth).unwrap();
    let station = client.list_stations().await.unwrap().into_iter().find(|s| s.name == "local").unwrap().station_id;
    let src = home.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("run.sh"), "true\n").unwrap();
    let request = CreateMission {
        name: "bench".into(),
        mission_type_id: Some(mission_server::catalogue::SHELL),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        ..Default::default()
    };
    let mission = client.create_and_upload_mission(&request, &src).await.unwrap().mission_id;

    let shared = home.path().join("sbatch");
    std::fs::create_dir_all(&shared).unwrap();
    println!(
        "{jobs} trivial one-CPU jobs on the one-node test Slurm ({} CPUs):",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let baseline = plain_sbatch(&cluster, jobs, &shared);
    baseline.print(jobs, None);
    let runner = through_our_api("slurm runner", &cluster, &client, station, mission, jobs, home.path(), &[]).await;
    runner.print(jobs, Some(&baseline));
    let pilot_flags =
        ["--pilots", "--max-pilots", "2", "--pilot-cpus", "1", "--pilot-memory", "1024", "--pilot-idle", "5"];
    let pilots = through_our_api("pilots", &cluster, &client, station, mission, jobs, home.path(), &pilot_flags).await;
    pilots.print(jobs, Some(&baseline));
}
