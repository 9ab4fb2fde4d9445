//! Jobs end to end: the real server on a free port, real `mission lz` agent processes, real jobs.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mission_api::EnergySource;
use mission_client::{
    CargoBayKind, Client, CreateCargoBay, CreateMission, CreateStation, Error, Job, JobResources, JobStatus, ListJobs,
    LogStream, Mission, PendingKind, RegisterLandingZone, RetryOn, RetryPolicy, RunJob, Uuid,
};
use mission_testkit::TestServer;
use tokio::process::{Child, Command};

use super::BIN;

pub(super) const SHELL: &str = "99e803ea-1829-42ba-be3d-294fb6a5e640";
pub(super) const PYTHON: &str = "c407e534-62e7-472b-8830-3d2ebe1bffbd";
/// The default station every first start creates (open to all users).
const LOCAL_STATION: &str = "6d697373-696f-4e00-8000-000000000002";

pub(super) fn local_station() -> Uuid {
    Uuid::parse_str(LOCAL_STATION).unwrap()
}

/// A `mission lz` agent process; killed when dropped.
pub(super) struct Agent {
    child: Child,
    pub(super) lz_id: Uuid,
    /// Holds the agent's data dir, `data/`.
    dir: tempfile::TempDir,
    /// Its landing zone's token, offer, extra flags and environment, to start it again.
    token: String,
    offer: Offer,
    extra: Vec<String>,
    env: Vec<(String, String)>,
}

/// What an agent offers.
#[derive(Clone, Copy)]
pub(super) struct Offer {
    cpus: u32,
    memory_mb: u64,
    /// GPUs a fake `nvidia-smi` on the agent's PATH reports.
    fake_gpus: u32,
    /// Run the agent as this uid instead of the test's (root's), with `setpriv`.
    run_as: Option<u32>,
}

pub(super) const TWO_CPUS: Offer = Offer { cpus: 2, memory_mb: 4096, fake_gpus: 0, run_as: None };

/// A fake `nvidia-smi` printing `count` GPUs like the H100 captured in the repository's `fixtures/`;
/// asked for `power.draw` (`-i 0,1`), it prints `$FAKE_GPU_WATTS` (default 250) for each GPU named.
fn fake_nvidia_smi(dir: &Path, count: u32) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/nvidia-smi/h100-query-noheader.csv");
    let line = std::fs::read_to_string(fixture).unwrap();
    let line = line.trim();
    let mut script = String::from(
        "#!/bin/sh\ncase \"$*\" in *power.draw*)\n\
         for i in $(echo \"$*\" | sed -n 's/.*-i \\([0-9,]*\\).*/\\1/p' | tr , ' '); do echo \"${FAKE_GPU_WATTS:-250}\"; done\n\
         exit 0;;\nesac\n",
    );
    for i in 0..count {
        let gpu = line.replacen("0,", &format!("{i},"), 1).replace("1ebdc96f6218", &format!("1ebdc96f621{i}"));
        script.push_str(&format!("echo '{gpu}'\n"));
    }
    let path = dir.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

impl Agent {
    /// Registers the LZ `name` on `station` and starts its agent; waits until it is online.
    pub(super) async fn start(server: &TestServer, admin: &Client, station: Uuid, name: &str, offer: Offer) -> Self {
        Self::start_with(server, admin, station, name, offer, &[]).await
    }

    /// Like [`Agent::start`], with `extra` flags for `mission lz`.
    pub(super) async fn start_with(
        server: &TestServer,
        admin: &Client,
        station: Uuid,
        name: &str,
        offer: Offer,
        extra: &[&str],
    ) -> Self {
        Self::start_at(&server.url, admin, station, name, offer, extra, &[]).await
    }

    /// Like [`Agent::start_with`], for the server at `url` (one run as a process of its own, say),
    /// with `env` set for `mission lz` (and so its jobs' `PATH`).
    pub(super) async fn start_at(
        url: &str,
        admin: &Client,
        station: Uuid,
        name: &str,
        offer: Offer,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Self {
        let registered = admin
            .register_landing_zone(station, &RegisterLandingZone { name: name.into(), cluster_account: None })
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let extra: Vec<String> = extra.iter().map(|e| (*e).to_owned()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(name, value)| ((*name).to_owned(), value.clone())).collect();
        let child = spawn_agent(url, dir.path(), &registered.token, offer, &extra, &env);
        let lz_id = registered.landing_zone.lz_id;
        wait_until("the agent is online", || async {
            let lzs = admin.list_landing_zones(station).await.unwrap();
            lzs.iter().any(|lz| lz.lz_id == lz_id && lz.online && lz.resources.is_some())
        })
        .await;
        Self { child, lz_id, dir, token: registered.token, offer, extra, env }
    }

    /// Kills the agent with `SIGKILL` and waits for it to go.
    pub(super) async fn kill_hard(&mut self) {
        self.child.kill().await.unwrap();
    }

    /// Starts the agent again, with its data dir, token and flags.
    pub(super) async fn restart(&mut self, server: &TestServer) {
        self.child = spawn_agent(&server.url, self.dir.path(), &self.token, self.offer, &self.extra, &self.env);
    }
}

/// Starts `mission lz` with the data dir `dir/data` (and its helpers in `dir/bin`).
fn spawn_agent(url: &str, dir: &Path, token: &str, offer: Offer, extra: &[String], env: &[(String, String)]) -> Child {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    if offer.fake_gpus > 0 {
        fake_nvidia_smi(&bin, offer.fake_gpus);
    }
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new(BIN);
    if let Some(uid) = offer.run_as {
        // That user needs a copy of the binary it can reach, and a data dir of its own.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(BIN, bin.join("mission")).unwrap();
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::os::unix::fs::chown(dir.join("data"), Some(uid), Some(uid)).unwrap();
        command = Command::new("setpriv");
        command.args(["--reuid", &uid.to_string(), "--regid", &uid.to_string(), "--clear-groups", "--"]);
        command.arg(bin.join("mission"));
    }
    command
        .args(["lz", "--server", url, "--lz-cpus", &offer.cpus.to_string()])
        .args(["--lz-memory", &offer.memory_mb.to_string(), "--data-dir"])
        .arg(dir.join("data"))
        .args(extra)
        .env("MISSION_LZ_TOKEN", token)
        .env("PATH", path)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .env_remove("MISSION_LZ_GPUS")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Polls `check` every 50 ms until it holds; fails after 60 s.
pub(super) async fn wait_until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_explained(what, check, String::new).await
}

/// [`wait_until`] that adds `explain()` (say, a log) to the failure.
pub(super) async fn wait_until_explained<F, Fut>(what: &str, mut check: F, explain: impl Fn() -> String)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}\n{}", explain());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a job reaches `status` (or any final status), answering it.
async fn wait_status(client: &Client, job_id: Uuid, status: JobStatus) -> Job {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let job = client.get_job(job_id).await.unwrap();
        if job.status == status || job.status.is_final() {
            return job;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until job {job_id} is {status}: {job:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The test server with an admin signed in.
pub(super) async fn cluster(adjust: impl FnOnce(&mut mission_server::ServerConfig)) -> (TestServer, Client) {
    let server = TestServer::spawn_with(adjust).await;
    server.add_user("root", true).await;
    let admin = server.sign_in("root").await;
    (server, admin)
}

/// A mission of `mission_type` with `files` (name, content), the entry `filename` and `args`.
pub(super) async fn mission(client: &Client, mission_type: &str, files: &[(&str, &str)], args: &[&str]) -> Mission {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let request = CreateMission {
        name: format!("test {}", files[0].0),
        mission_type_id: Some(Uuid::parse_str(mission_type).unwrap()),
        settings: Some(BTreeMap::from([("filename".to_owned(), files[0].0.to_owned())])),
        ..Default::default()
    };
    let mission = client.create_and_upload_mission(&request, dir.path()).await.unwrap();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    client.update_mission_args(mission.mission_id, &args).await.unwrap()
}

/// Whether `job` ran without its limits enforced (no cgroups on this host), which `what` of a
/// test needs: CI must have them; elsewhere it says it skips.
fn ran_without_limits(what: &str, job: &Job) -> bool {
    let limits = job.limits.clone().unwrap_or_default();
    if !limits.starts_with("limits not enforced") {
        return false;
    }
    mission_testkit::skip_unless_required("CGROUPS", format!("{what}: {limits}"));
    true
}

fn cpus(n: u32) -> JobResources {
    JobResources { cpu_count: Some(n), ..Default::default() }
}

#[tokio::test]
async fn shell_and_python_missions_run_and_return_results() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;

    let script = "echo \"args: $*\"\necho \"job $JOB_ID of $MISSION_ID threads $OMP_NUM_THREADS gpus [$CUDA_VISIBLE_DEVICES]\"\n\
                  echo oops >&2\nmkdir -p out && cat data/in.txt | tr a-z A-Z > out/upper.txt\necho changed > data/in.txt\n";
    let shell = mission(
        alice,
        SHELL,
        &[("run.sh", script), ("data/in.txt", "hello\n"), ("same.txt", "kept\n")],
        &["one", "two words"],
    )
    .await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), JobResources::default()).await.unwrap();
    assert_eq!(job.status, JobStatus::Queued);
    assert_eq!((job.cpu_count, job.memory_amount, job.gpu_count), (1, 1024, 0), "the type's defaults");
    assert_eq!(job.command, ["bash", "run.sh", "one", "two words"]);
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(done.exit_code, Some(0));
    let states: Vec<JobStatus> = done.history.iter().map(|t| t.status).collect();
    use JobStatus::*;
    assert_eq!(states, [Queued, Assigned, Staging, Running, Uploading, Completed]);
    assert!(done.started_at.is_some() && done.finished_at.is_some());
    assert!(done.limits.is_some(), "the job says how its limits were enforced");

    let stdout = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert!(stdout.contains("args: one two words"), "{stdout}");
    assert!(stdout.contains(&format!("job {} of {} threads 1 gpus []", job.job_id, shell.mission_id)), "{stdout}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap(), "oops\n");

    let mut results: Vec<String> =
        alice.list_job_results(job.job_id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    results.sort();
    assert_eq!(results, ["data/in.txt", "mission-logs/stderr.log", "mission-logs/stdout.log", "out/upper.txt"]);
    let dest = tempfile::tempdir().unwrap();
    let summary = alice.download_job_results(job.job_id, dest.path()).await.unwrap();
    assert_eq!(summary.transferred, 4);
    assert_eq!(std::fs::read_to_string(dest.path().join("out/upper.txt")).unwrap(), "HELLO\n");
    assert_eq!(std::fs::read_to_string(dest.path().join("data/in.txt")).unwrap(), "changed\n");
    assert!(std::fs::read_to_string(dest.path().join("mission-logs/stdout.log")).unwrap().contains("args: one"));
    // The same results as one archive.
    let token = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let archive = reqwest::Client::new()
        .get(format!("{}/api/v1/jobs/{}/archive", server.url, job.job_id))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        archive.headers()["content-disposition"],
        format!("attachment; filename=\"job-{}-results.zip\"", job.job_id)
    );
    let archived = mission_testkit::unzip(&archive.bytes().await.unwrap());
    let mut names: Vec<&str> = archived.iter().map(|(name, _)| name.as_str()).collect();
    names.sort();
    assert_eq!(names, results, "the archive holds what the listing lists");
    for (name, content) in &archived {
        assert_eq!(content, &std::fs::read(dest.path().join(name)).unwrap(), "{name}");
    }

    let py = "import sys, os\nprint('py args', sys.argv[1:])\nopen('result.txt', 'w').write(os.environ['JOB_ID'])\nsys.exit(3)\n";
    let python = mission(alice, PYTHON, &[("main.py", py)], &["--n", "5"]).await;
    let job = alice.run_job_on_station(python.mission_id, local_station(), cpus(2)).await.unwrap();
    let mut followed = String::new();
    let status = alice.follow_job_logs(job.job_id, LogStream::Stdout, |s| followed.push_str(s)).await.unwrap();
    assert_eq!(status, JobStatus::Failed);
    assert_eq!(followed, "py args ['--n', '5']\n");
    let done = alice.get_job(job.job_id).await.unwrap();
    assert_eq!((done.exit_code, done.reason.as_deref()), (Some(3), Some("exit status 3")));
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "result.txt"), "results of a failed job are kept too");

    // Listing and filters.
    let page = alice.list_jobs_page(&mission_client::ListJobs::default()).await.unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(page.jobs[0].job_id, job.job_id, "newest first");
    let failed = mission_client::ListJobs { statuses: vec![JobStatus::Failed], ..Default::default() };
    assert_eq!(alice.list_jobs(&failed).await.unwrap().len(), 1);
    // A finished job cannot be stopped; a mission with no unfinished job can be deleted.
    assert!(matches!(alice.stop_job(job.job_id).await, Err(Error::Api(p)) if p.status == 409));
    // Its jobs stay, with their history and usage; their results go with the mission.
    let usage = alice.job_usage(&Default::default()).await.unwrap();
    alice.delete_mission_by_id(python.mission_id).await.unwrap();
    let kept = alice.get_job(job.job_id).await.unwrap();
    assert_eq!((kept.status, kept.history.len()), (done.status, done.history.len()));
    assert!(alice.list_job_results(job.job_id).await.unwrap().is_empty());
    assert_eq!(alice.job_usage(&Default::default()).await.unwrap(), usage);
    assert!(matches!(alice.rerun_job(job.job_id).await, Err(Error::NotFound(_))), "its mission is gone");
}

#[tokio::test]
async fn results_and_logs_land_in_the_destination_cargo_bay() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let alice_id = alice.whoami().await.unwrap().user_id;
    let bay_dir = tempfile::tempdir().unwrap();
    let bay = admin
        .create_cargo_bay(&CreateCargoBay {
            user_id: Some(alice_id),
            path: Some(bay_dir.path().to_str().unwrap().to_owned()),
            ..CreateCargoBay::new("results", CargoBayKind::Local)
        })
        .await
        .unwrap();
    let src = tempfile::tempdir().unwrap();
    std::fs::write(
        src.path().join("run.sh"),
        "echo to the log\necho problem >&2\nmkdir out && echo 42 > out/answer.txt\n",
    )
    .unwrap();
    let request = CreateMission {
        name: "with a destination".into(),
        mission_type_id: Some(Uuid::parse_str(SHELL).unwrap()),
        settings: Some(BTreeMap::from([("filename".to_owned(), "run.sh".to_owned())])),
        destination_storage_id: Some(bay.storage_id),
        destination_path: Some("runs".into()),
        ..Default::default()
    };
    let mission = alice.create_and_upload_mission(&request, src.path()).await.unwrap();
    let job = alice.run_job_on_station(mission.mission_id, local_station(), JobResources::default()).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");

    // Its results are in the bay by the time it is seen completed; its logs follow at once.
    let landed = bay_dir.path().join("runs").join(job.job_id.to_string());
    let read = |path: &str| std::fs::read_to_string(landed.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(read("out/answer.txt"), "42\n");
    let logs = landed.join("mission-logs");
    wait_until("the logs are in the bay", || {
        let logs = logs.clone();
        async move { logs.join("stdout.log").exists() && logs.join("stderr.log").exists() }
    })
    .await;
    assert_eq!(read("mission-logs/stdout.log"), "to the log\n");
    assert_eq!(read("mission-logs/stderr.log"), "problem\n");
    // The API lists and serves them once each.
    let mut results: Vec<String> =
        alice.list_job_results(job.job_id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    results.sort();
    assert_eq!(results, ["mission-logs/stderr.log", "mission-logs/stdout.log", "out/answer.txt"]);
    let dest = tempfile::tempdir().unwrap();
    assert_eq!(alice.download_job_results(job.job_id, dest.path()).await.unwrap().transferred, 3);
    assert_eq!(std::fs::read_to_string(dest.path().join("out/answer.txt")).unwrap(), "42\n");
}

#[tokio::test]
async fn placement_refusal_queueing_named_lz_and_membership() {
    let (server, admin) = cluster(|_| {}).await;
    let a = Agent::start(&server, &admin, local_station(), "a", TWO_CPUS).await;
    let b = Agent::start(&server, &admin, local_station(), "b", Offer { cpus: 1, memory_mb: 2048, ..TWO_CPUS }).await;
    let alice = &server.client;
    let sleeper = mission(alice, SHELL, &[("run.sh", "sleep 1\n")], &[]).await;

    // More than any LZ has: refused at once, naming why.
    let err = alice.run_job_on_station(sleeper.mission_id, local_station(), cpus(3)).await.unwrap_err();
    let Error::Api(problem) = err else { panic!("{err:?}") };
    assert_eq!(problem.status, 400);
    assert!(problem.detail.contains("could ever hold") && problem.detail.contains("cpu_count 3"), "{}", problem.detail);
    // A named LZ too small for the job.
    let err = alice.run_job_on_lz(sleeper.mission_id, local_station(), b.lz_id, cpus(2)).await.unwrap_err();
    assert!(matches!(err, Error::Api(p) if p.status == 400));
    // An LZ of another station.
    let err = alice.run_job_on_lz(sleeper.mission_id, local_station(), Uuid::new_v4(), cpus(1)).await.unwrap_err();
    assert!(matches!(err, Error::Api(p) if p.status == 400 && p.detail.contains("lz_id")));

    // Two 2-CPU jobs on the named 2-CPU LZ: the second waits for the first.
    let first = alice.run_job_on_lz(sleeper.mission_id, local_station(), a.lz_id, cpus(2)).await.unwrap();
    let second = alice.run_job_on_lz(sleeper.mission_id, local_station(), a.lz_id, cpus(2)).await.unwrap();
    wait_status(alice, first.job_id, JobStatus::Running).await;
    assert_eq!(alice.get_job(second.job_id).await.unwrap().status, JobStatus::Queued);
    let first = alice.wait_for_job(first.job_id).await.unwrap();
    let second = alice.wait_for_job(second.job_id).await.unwrap();
    assert_eq!((first.status, second.status), (JobStatus::Completed, JobStatus::Completed));
    assert_eq!((first.lz_id, second.lz_id), (Some(a.lz_id), Some(a.lz_id)));
    assert!(second.started_at.unwrap() >= first.finished_at.unwrap(), "one after the other");

    // A members-only station: a non-member cannot use it; a member can.
    let station = admin
        .create_station(&mission_client::CreateStation { name: "private".into(), ..Default::default() })
        .await
        .unwrap();
    let _c = Agent::start(&server, &admin, station.station_id, "c", TWO_CPUS).await;
    let err = alice.run_job_on_station(sleeper.mission_id, station.station_id, cpus(1)).await.unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    admin.add_station_member(station.station_id, "alice").await.unwrap();
    let job = alice.run_job_on_station(sleeper.mission_id, station.station_id, cpus(1)).await.unwrap();
    assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().status, JobStatus::Completed);
}

/// Whether a process is gone (or a zombie waiting for a reaper).
/// The uid a job runs as, from its `limits` (`…; runs as uid N, …`), or `None` where the agent
/// cannot separate users (not root); CI sets `MISSION_REQUIRE_SANDBOX` to make that a failure.
fn job_uid(job: &Job) -> Option<u32> {
    let limits = job.limits.as_deref().unwrap_or_default();
    let uid = limits.split("runs as uid ").nth(1).and_then(|rest| rest.split(',').next()?.parse().ok());
    if uid.is_none() {
        mission_testkit::skip_unless_required("SANDBOX", format!("jobs are not sandboxed here: {limits}"));
    }
    uid
}

/// Live processes (not zombies) running as `uid`.
fn processes_of(uid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field =
            |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_default().trim().to_owned();
        let real_uid = field("Uid:").split_whitespace().next().and_then(|u| u.parse::<u32>().ok());
        if real_uid == Some(uid) && !field("State:").starts_with('Z') {
            found.push(pid);
        }
    }
    found
}

/// The work dir of a running job whose script begins with `pwd >&2`. Jobs cannot see the test's
/// folders (their /tmp is their own), so the test reaches them through their work dirs.
async fn work_dir(client: &Client, job_id: Uuid) -> PathBuf {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let printed = client.job_logs(job_id, LogStream::Stderr).await.unwrap();
        if let Some(dir) = printed.lines().next().filter(|_| printed.ends_with('\n')) {
            return PathBuf::from(dir);
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for job {job_id} to print its work dir");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn stopping_queued_and_running_jobs() {
    let (server, admin) = cluster(|_| {}).await;
    let mut agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    // The job and a background child of it wait.
    let m = mission(alice, SHELL, &[("run.sh", "sleep 300 &\nwait\n")], &[]).await;
    let running = alice.run_job_on_station(m.mission_id, local_station(), cpus(2)).await.unwrap();
    let queued = alice.run_job_on_station(m.mission_id, local_station(), cpus(2)).await.unwrap();
    let uid = job_uid(&wait_status(alice, running.job_id, JobStatus::Running).await);
    if let Some(uid) = uid {
        wait_until("the job and its child run", || async { processes_of(uid).len() == 2 }).await;
    }

    // Neither the landing zone nor the station can go while they hold jobs.
    let err = admin.remove_landing_zone(local_station(), agent.lz_id).await.unwrap_err();
    assert!(matches!(&err, Error::Api(p) if p.status == 409 && p.detail.contains("stop them first")), "{err:?}");
    assert!(matches!(admin.delete_station(local_station()).await, Err(Error::Api(p)) if p.status == 409));

    let stopped = alice.stop_job(queued.job_id).await.unwrap();
    assert_eq!(stopped.status, JobStatus::Stopped, "a queued job stops at once");
    assert!(stopped.reason.unwrap().contains("stopped by alice"));

    alice.stop_job(running.job_id).await.unwrap();
    let done = wait_status(alice, running.job_id, JobStatus::Stopped).await;
    assert_eq!(done.status, JobStatus::Stopped, "{done:?}");
    if let Some(uid) = uid {
        wait_until("the job's processes are gone", || async { processes_of(uid).is_empty() }).await;
    }
    // The queued job never ran.
    assert!(alice.get_job(queued.job_id).await.unwrap().started_at.is_none());
    // A job that asks for the landing zone by its id, and ends.
    let quick = mission(alice, SHELL, &[("run.sh", "echo done\n")], &[]).await;
    let asked = RunJob { station_id: local_station(), lz_id: Some(agent.lz_id), ..Default::default() };
    let asked = alice.run_job(quick.mission_id, &asked).await.unwrap();
    assert_eq!(alice.wait_for_job(asked.job_id).await.unwrap().status, JobStatus::Completed);
    let usage = alice.job_usage(&Default::default()).await.unwrap();

    // With its jobs ended the LZ can go: its agent's order stream ends and its token, which the
    // server had cached from the agent's requests, is refused on the agent's next connect.
    admin.remove_landing_zone(local_station(), agent.lz_id).await.unwrap();
    // The jobs outlive it, with their history and usage: the one that asked for it no longer
    // names it.
    for (job, status) in [(asked.job_id, JobStatus::Completed), (running.job_id, JobStatus::Stopped)] {
        let kept = alice.get_job(job).await.unwrap();
        assert_eq!((kept.status, kept.requested_lz_id, kept.lz_id), (status, None, None), "{kept:?}");
        assert!(!kept.history.is_empty());
    }
    assert_eq!(alice.job_usage(&Default::default()).await.unwrap(), usage);
    let exit = tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await;
    let exit = exit.expect("the agent of a removed LZ stops").unwrap();
    assert!(!exit.success(), "{exit:?}");
}

#[tokio::test]
async fn an_lz_killed_mid_job_loses_it() {
    let (server, admin) = cluster(|config| config.lz_lease = Duration::from_secs(2)).await;
    let mut agent = Agent::start(&server, &admin, local_station(), "doomed", TWO_CPUS).await;
    let alice = &server.client;
    // A job whose processes would run on: one in a session of its own, one double-forked.
    let script = "setsid sleep 300 &\n(sleep 300 &)\nsleep 300\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let uid = job_uid(&wait_status(alice, job.job_id, JobStatus::Running).await);
    if let Some(uid) = uid {
        wait_until("the job's three processes run", || async { processes_of(uid).len() == 4 }).await;
    }
    agent.child.start_kill().unwrap();
    // A job never outlives its agent: all of it dies with it, at once.
    if let Some(uid) = uid {
        wait_until("the job's processes are gone", || async { processes_of(uid).is_empty() }).await;
    }
    let lost = wait_status(alice, job.job_id, JobStatus::Lost).await;
    assert_eq!(lost.status, JobStatus::Lost);
    assert!(lost.reason.unwrap().contains("went silent"));
}

/// A job script that tries each `WHAT:TARGET` argument it is given (read a file, list a folder,
/// write a file, signal a pid) and prints `ALLOWED …` or `denied …` for each, after its uid.
pub const PROBE: &str = r#"echo "uid=$(id -u)"
for t in "$@"; do
  what=${t%%:*}; target=${t#*:}
  case $what in
    read) cat "$target" > /dev/null 2>&1 ;;
    list) ls "$target" > /dev/null 2>&1 ;;
    write) (echo pwned > "$target") 2> /dev/null ;;
    signal) kill -0 "$target" 2> /dev/null ;;
  esac && echo "ALLOWED $t" || echo "denied $t"
done
"#;

/// Runs [`PROBE`] as `client` against `targets` and checks every attempt was refused.
async fn probe_is_refused_everything(client: &Client, station: Uuid, targets: &[String]) {
    let args: Vec<&str> = targets.iter().map(String::as_str).collect();
    let m = mission(client, SHELL, &[("probe.sh", PROBE)], &args).await;
    let job = client.run_job_on_station(m.mission_id, station, cpus(1)).await.unwrap();
    let done = client.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let out = client.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert!(!out.contains("ALLOWED"), "a job reached what is not its own:\n{out}");
    assert_eq!(out.matches("denied").count(), targets.len(), "{out}");
    if job_uid(&done).is_some() {
        assert!(!out.starts_with("uid=0\n"), "{out}");
    }
}

#[tokio::test]
async fn a_job_cannot_reach_the_agent_the_server_or_other_users_jobs() {
    let (server, admin) = cluster(|_| {}).await;
    let agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    // Bob's job keeps a secret in its work dir and waits.
    let script = "pwd >&2\necho secret > secret.txt\nwhile [ ! -e go ]; do sleep 0.05; done\n";
    let secret = mission(&bob, SHELL, &[("run.sh", script), ("input.txt", "bob's input")], &[]).await;
    let bobs_job = bob.run_job_on_station(secret.mission_id, local_station(), cpus(1)).await.unwrap();
    let bobs_dir = work_dir(&bob, bobs_job.job_id).await;
    let files = bob.get_mission_files(secret.mission_id).await.unwrap();
    let sha = &files.iter().find(|f| f.filename == "input.txt").unwrap().sha256;
    let cache = agent.dir.path().join("data/cache");
    let (agent_data, server_data) = (agent.dir.path().join("data"), server.data_dir.path().join("data"));
    let targets = [
        format!("read:{}", cache.join(sha).display()),
        format!("write:{}", cache.join(sha).display()),
        format!("write:{}", cache.join("planted").display()),
        format!("list:{}", cache.display()),
        format!("list:{}", agent_data.display()),
        format!("read:{}", server_data.join("idp-signing-key.p8").display()),
        format!("read:{}", server_data.join("mission.db").display()),
        format!("list:{}", server_data.display()),
        format!("read:{}", bobs_dir.join("secret.txt").display()),
        format!("read:{}", bobs_dir.join("input.txt").display()),
        format!("write:{}", bobs_dir.join("planted").display()),
        format!("list:{}", bobs_dir.display()),
        format!("signal:{}", agent.child.id().unwrap()),
        "signal:1".to_owned(),
    ];
    probe_is_refused_everything(&server.client, local_station(), &targets).await;
    assert_eq!(std::fs::read_to_string(cache.join(sha)).unwrap(), "bob's input", "the cache is unchanged");
    assert!(!bobs_dir.join("planted").exists());
    std::fs::write(bobs_dir.join("go"), "").unwrap();
    assert_eq!(bob.wait_for_job(bobs_job.job_id).await.unwrap().status, JobStatus::Completed);
}

#[tokio::test]
async fn an_agent_that_cannot_separate_users_runs_only_its_operators_jobs() {
    let (server, admin) = cluster(|_| {}).await;
    // As root, the agent runs as nobody; otherwise it is not root anyway.
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    let unprivileged = Offer { run_as: root.then_some(65534), ..TWO_CPUS };
    let mut agent = Agent::start(&server, &admin, local_station(), "shared", unprivileged).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let refused = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(refused.status, JobStatus::Failed, "{refused:?}");
    let reason = refused.reason.unwrap_or_default();
    assert!(reason.contains("refused by the landing zone") && reason.contains("--lz-allow-unisolated"), "{reason}");
    assert!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap().is_empty(), "it never ran");

    // An admin's job runs, as the agent's user, and says so.
    let m = mission(&admin, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let job = admin.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let done = admin.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert!(done.limits.unwrap_or_default().contains("the landing-zone agent's own user"));

    // Its operator may allow everyone's jobs.
    agent.child.kill().await.unwrap();
    admin.remove_landing_zone(local_station(), agent.lz_id).await.unwrap();
    let extra = ["--lz-allow-unisolated"];
    let _agent = Agent::start_with(&server, &admin, local_station(), "allowing", unprivileged, &extra).await;
    let m = mission(alice, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().status, JobStatus::Completed);
}

#[tokio::test]
async fn a_mapped_users_jobs_run_as_their_account_and_the_unmapped_as_their_own_uid_or_not_at_all() {
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        mission_testkit::skip_unless_required("SANDBOX", "running jobs as mapped accounts needs root");
        return;
    }
    let (server, admin) = cluster(|_| {}).await;
    let maps = tempfile::tempdir().unwrap();
    let map = maps.path().join("users.map");
    std::fs::write(&map, "# mission user -> account\nalice nobody\n").unwrap();
    let map = map.display().to_string();
    let mapped = ["--user-map", map.as_str()];
    let mut agent = Agent::start_with(&server, &admin, local_station(), "mapped", TWO_CPUS, &mapped).await;
    // What it writes belongs to the account: on shared storage, to the right person.
    let script = "id -u\necho made > mine.txt\nstat -c %u mine.txt\n";
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "65534\n65534\n");
    let limits = done.limits.unwrap_or_default();
    assert!(limits.contains("runs as nobody (uid 65534), the account its user is mapped to"), "{limits}");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "mine.txt"), "{results:?}");

    // root, a mission user the map does not name, gets a uid of its own as without a map.
    let theirs = mission(&admin, SHELL, &[("run.sh", script)], &[]).await;
    let job = admin.run_job_on_station(theirs.mission_id, local_station(), cpus(1)).await.unwrap();
    let done = admin.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let uid = job_uid(&done).expect("the suite runs as root");
    assert_ne!(uid, 65534);
    assert_eq!(admin.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), format!("{uid}\n{uid}\n"));

    // A site that says so refuses them.
    agent.child.kill().await.unwrap();
    admin.remove_landing_zone(local_station(), agent.lz_id).await.unwrap();
    let strict = ["--user-map", map.as_str(), "--refuse-unmapped"];
    let _agent = Agent::start_with(&server, &admin, local_station(), "strict", TWO_CPUS, &strict).await;
    let job = admin.run_job_on_station(theirs.mission_id, local_station(), cpus(1)).await.unwrap();
    let refused = admin.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(refused.status, JobStatus::Failed, "{refused:?}");
    assert_eq!(
        refused.reason.as_deref(),
        Some("refused by the landing zone: mission user \"root\" has no account in its user map")
    );
    let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().status, JobStatus::Completed);
}

#[tokio::test]
async fn setsid_children_end_with_their_job_with_or_without_cgroups() {
    for extra in [&[][..], &["--lz-no-limits"]] {
        let (server, admin) = cluster(|_| {}).await;
        let _agent = Agent::start_with(&server, &admin, local_station(), "lz1", TWO_CPUS, extra).await;
        let alice = &server.client;
        let script = "setsid sleep 300 &\n(sleep 300 &)\nsleep 0.2\necho started\n";
        let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
        let job = alice.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
        let done = alice.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{extra:?}: {done:?}");
        if let Some(uid) = job_uid(&done) {
            assert!(processes_of(uid).is_empty(), "{extra:?}: nothing of the job runs after its end");
        }
    }
}

#[tokio::test]
async fn a_job_survives_a_server_restart() {
    let (mut server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "steady", TWO_CPUS).await;
    let script =
        "pwd >&2\necho before\nwhile [ ! -e go ]; do sleep 0.05; done\nrm go\necho after\necho result > out.txt\n";
    let m = mission(&server.client, SHELL, &[("run.sh", script)], &[]).await;
    let job = server.client.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let dir = work_dir(&server.client, job.job_id).await;
    server.restart().await;
    // The job ends while the agent may still be reconnecting.
    std::fs::write(dir.join("go"), "").unwrap();
    let done = server.client.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let stdout = server.client.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert_eq!(stdout, "before\nafter\n");
    let results = server.client.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "out.txt"));
}

#[tokio::test]
async fn a_job_that_ends_while_the_server_is_down_completes_when_it_returns() {
    let (mut server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "steady", TWO_CPUS).await;
    // Nothing to send at its end (no output after the work dir, no result file: an empty dir is
    // none), so the agent finishes the job while the server is away and only its final report
    // waits.
    let script = "mkdir ending\npwd >&2\nwhile [ ! -e go ]; do sleep 0.05; done\nrm go\n";
    let m = mission(&server.client, SHELL, &[("run.sh", script)], &[]).await;
    let job = server.client.run_job_on_station(m.mission_id, local_station(), cpus(1)).await.unwrap();
    let dir = work_dir(&server.client, job.job_id).await;
    server.stop().await;
    std::fs::write(dir.join("go"), "").unwrap();
    // The agent cleans the work dir once it has queued the job's end.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while dir.join("ending").exists() {
        assert!(tokio::time::Instant::now() < deadline, "the job did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.start().await;
    let done = server.client.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "the server waits for the report: {done:?}");
}

#[tokio::test]
async fn memory_limit_ends_a_job_out_of_memory() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let py = "x = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')\n";
    let m = mission(alice, PYTHON, &[("eat.py", py)], &[]).await;
    let resources = JobResources { memory_amount: Some(64), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), resources).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    if ran_without_limits("memory_limit_ends_a_job_out_of_memory", &done) {
        return;
    }
    assert_eq!(done.status, JobStatus::Failed, "{done:?}");
    assert_eq!(done.reason.as_deref(), Some("out of memory"), "{done:?}");
}

#[tokio::test]
async fn a_job_past_its_time_limit_fails_with_that_reason_and_returns_its_results() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo started\necho partial > part.txt\nexec sleep 600\n")], &[]).await;
    let too_long = JobResources { time_limit: Some(0), ..Default::default() };
    let refused = alice.run_job_on_station(m.mission_id, local_station(), too_long).await.unwrap_err();
    assert!(refused.to_string().contains("time_limit"), "{refused}");
    let one_minute = JobResources { time_limit: Some(1), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), one_minute).await.unwrap();
    assert_eq!(job.time_limit, Some(1));
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!((done.status, done.reason.as_deref()), (JobStatus::Failed, Some("time limit")), "{done:?}");
    let ran = done.finished_at.unwrap() - done.started_at.unwrap();
    assert!((60..90).contains(&ran.num_seconds()), "ended after {ran}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "started\n");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "part.txt"), "{results:?}");
}

#[tokio::test]
async fn gpus_are_detected_and_handed_out_by_index() {
    let (server, admin) = cluster(|_| {}).await;
    let agent = Agent::start(&server, &admin, local_station(), "gpu", Offer { fake_gpus: 2, ..TWO_CPUS }).await;
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    let lz = lzs.iter().find(|lz| lz.lz_id == agent.lz_id).unwrap();
    assert_eq!(lz.resources.unwrap().gpu_count, 2, "two GPUs from the fake nvidia-smi");
    let alice = &server.client;
    let script = "pwd >&2\necho \"gpus=$CUDA_VISIBLE_DEVICES\"\nwhile [ ! -e go ]; do sleep 0.05; done\nrm go\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let one_gpu = JobResources { gpu_count: Some(1), ..Default::default() };
    let a = alice.run_job_on_station(m.mission_id, local_station(), one_gpu).await.unwrap();
    let b = alice.run_job_on_station(m.mission_id, local_station(), one_gpu).await.unwrap();
    let a_running = wait_status(alice, a.job_id, JobStatus::Running).await;
    let b_running = wait_status(alice, b.job_id, JobStatus::Running).await;
    let mut indices = [a_running.gpu_indices.clone(), b_running.gpu_indices.clone()];
    indices.sort();
    assert_eq!(indices, [vec![0], vec![1]], "concurrent jobs get different GPUs");
    let err = alice
        .run_job_on_station(m.mission_id, local_station(), JobResources { gpu_count: Some(3), ..Default::default() })
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Api(p) if p.status == 400 && p.detail.contains("gpu_count 3")), "{err:?}");
    for job in [&a, &b] {
        std::fs::write(work_dir(alice, job.job_id).await.join("go"), "").unwrap();
    }
    let mut seen = Vec::new();
    for job in [a, b] {
        let done = alice.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed);
        seen.push(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap());
    }
    seen.sort();
    assert_eq!(seen, ["gpus=0\n", "gpus=1\n"]);
}

/// The fake NVML of `fixtures/fake-nvml`, built with gcc into `dir`.
fn fake_nvml(dir: &Path) -> std::path::PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fake-nvml/nvml.c");
    let library = dir.join("libfake-nvml.so");
    let built =
        std::process::Command::new("gcc").args(["-shared", "-fPIC", "-O2", "-o"]).arg(&library).arg(source).status();
    assert!(built.unwrap().success(), "gcc builds the fake NVML");
    library
}

/// A RAPL zone `zone` (`package-0`, `dram`) under the powercap tree `root`, its counter at `uj`.
fn rapl_zone(root: &Path, zone: &str, name: &str, uj: u64) {
    let dir = root.join(zone);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
    std::fs::write(dir.join("energy_uj"), format!("{uj}\n")).unwrap();
    std::fs::write(dir.join("max_energy_range_uj"), "262143328850\n").unwrap();
}

/// A GPU job's energy is measured by its landing zone, each of the three ways, on fakes of
/// NVML and `nvidia-smi` whose GPU draws 400 W: NVML's energy counter, NVML's power sampled
/// where the device has no counter, and `nvidia-smi`'s where NVML cannot be loaded. The first
/// landing zone also has RAPL counters (a fake powercap tree, advanced by 1 Wh of packages and
/// 0.1 Wh of memory while the job runs): its CPU and memory parts are those times the job's share
/// of the host's CPU time; the others' are modelled. The job's energy is the parts' sum.
#[tokio::test]
async fn a_gpu_jobs_energy_is_measured_by_its_landing_zone() {
    let (server, admin) = cluster(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let nvml = fake_nvml(dir.path()).display().to_string();
    let powercap = dir.path().join("powercap");
    rapl_zone(&powercap, "intel-rapl:0", "package-0", 1_000_000);
    rapl_zone(&powercap, "intel-rapl:0:0", "dram", 1_000_000);
    let watts = ("FAKE_GPU_WATTS", "400".to_owned());
    let ways = [
        (
            "counter",
            vec![
                ("MISSION_NVML_LIBRARY", nvml.clone()),
                ("MISSION_POWERCAP_DIR", powercap.display().to_string()),
                watts.clone(),
            ],
            EnergySource::GpuCounter,
        ),
        (
            "nvml-power",
            vec![("MISSION_NVML_LIBRARY", nvml), ("FAKE_NVML_NO_COUNTER", "1".into()), watts.clone()],
            EnergySource::GpuPowerSamples,
        ),
        (
            "smi-power",
            vec![("MISSION_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1".into()), watts],
            EnergySource::GpuPowerSamples,
        ),
    ];
    let alice = &server.client;
    // A little CPU time, then it waits for the test to advance the RAPL counters.
    let script =
        "pwd >&2\ni=0; while [ $i -lt 20000 ]; do i=$((i+1)); done\nwhile [ ! -e go ]; do sleep 0.05; done\nsleep 2\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let mut agents = Vec::new();
    let mut jobs = Vec::new();
    for (name, env, source) in ways {
        let open = CreateStation { name: name.into(), open: Some(true), ..Default::default() };
        let station = admin.create_station(&open).await.unwrap().station_id;
        let offer = Offer { fake_gpus: 1, ..TWO_CPUS };
        agents.push(Agent::start_at(&server.url, &admin, station, name, offer, &[], &env).await);
        let one_gpu = JobResources { gpu_count: Some(1), memory_amount: Some(1000), ..Default::default() };
        jobs.push((name, alice.run_job_on_station(m.mission_id, station, one_gpu).await.unwrap(), source));
    }
    for (_, job, _) in &jobs {
        wait_status(alice, job.job_id, JobStatus::Running).await;
    }
    rapl_zone(&powercap, "intel-rapl:0", "package-0", 1_000_000 + 3_600_000_000);
    rapl_zone(&powercap, "intel-rapl:0:0", "dram", 1_000_000 + 360_000_000);
    for (_, job, _) in &jobs {
        std::fs::write(work_dir(alice, job.job_id).await.join("go"), "").unwrap();
    }
    for (name, job, source) in jobs {
        let done = alice.wait_for_job(job.job_id).await.unwrap();
        assert_eq!(done.status, JobStatus::Completed, "{name}: {done:?}");
        let usage = done.usage.clone().unwrap();
        let parts = usage.energy_parts.clone().expect("the parts of its energy");
        let gpu = parts.gpu.expect("a GPU part");
        assert_eq!(gpu.source, source, "{name}: {parts:?}");
        // 400 W over its run: the meters run from its start to its end, a little past its wall time.
        let expected = 400.0 * usage.wall_time / 3600.0;
        assert!((gpu.wh - expected).abs() < 0.15 * expected, "{name}: {} Wh, not about {expected}", gpu.wh);
        let (cpu, memory) = (parts.cpu.unwrap(), parts.memory.unwrap());
        if name == "counter" && !ran_without_limits("the RAPL part of a_gpu_jobs_energy_is_measured", &done) {
            // Its share of the host's CPU time: some, not all (the host ran the others too).
            assert_eq!((cpu.source, memory.source), (EnergySource::Rapl, EnergySource::Rapl), "{parts:?}");
            assert!(cpu.wh > 0.0 && cpu.wh < 1.0 && (memory.wh - cpu.wh / 10.0).abs() < 1e-9, "{parts:?}");
        } else if name != "counter" {
            assert_eq!((cpu.source, memory.source), (EnergySource::Model, EnergySource::Model), "{name}");
        }
        let energy = usage.energy_kwh.unwrap();
        assert!((energy - (gpu.wh + cpu.wh + memory.wh) * 1.67 / 1000.0).abs() < 1e-12, "{name}: {usage:?}");
    }
    drop(agents);
}

#[tokio::test]
async fn the_console_shows_a_job_live_and_stops_another() {
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let script =
        "for i in 1 2 3 4 5 6; do echo \"line $i\"; sleep 0.4; done\necho 'oops <b>' >&2\necho done > out.txt\n";
    let shell = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;

    // The jobs list changes as the job does, without reloading.
    browser.goto(&format!("{}/jobs?mission={}", server.url, shell.mission_id)).await;
    browser.wait_for_text("#live-state", "live").await;
    browser.execute("window.stillThisPage = true", serde_json::json!([])).await;
    let job = alice.run_job_on_station(shell.mission_id, local_station(), JobResources::default()).await.unwrap();
    let row = format!("tr[data-job='{}'] .state", job.job_id);
    browser.wait_for_text(&row, "running").await;
    let live_row = browser.wait_for_text(&format!("tr[data-job='{}']", job.job_id), "test run.sh").await;
    assert!(live_row.contains("local"), "the new row names its station: {live_row}");
    browser.screenshot("console-jobs").await;
    assert_eq!(browser.execute("return window.stillThisPage === true", serde_json::json!([])).await, true);

    // Its page shows output as it is written, then the job's end, its results and their archive.
    browser.click(&format!("tr[data-job='{}'] a", job.job_id)).await;
    let early = browser.wait_for_text("#stdout", "line 2").await;
    assert!(!early.contains("line 6"), "seen while the job still runs: {early}");
    browser.screenshot("console-job-running").await;
    browser.wait_for_text("#job-status", "completed").await;
    browser.wait_for_text("#results", "out.txt").await;
    assert_eq!(browser.text("#stderr").await, "oops <b>", "output is text, not markup");
    let stdout = browser.text("#stdout").await;
    assert_eq!(stdout.lines().collect::<Vec<_>>(), ["line 1", "line 2", "line 3", "line 4", "line 5", "line 6"]);
    browser.screenshot("console-job-done").await;
    let cookie = format!("mission_session={}", browser.cookie("mission_session").await["value"].as_str().unwrap());
    let href = browser.property("#results a[href$='out.txt']", "href").await;
    let http = reqwest::Client::new();
    let out = http.get(href.as_str().unwrap()).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(out.bytes().await.unwrap().as_ref(), b"done\n");
    let href = browser.property("#download-results", "href").await;
    let archive = http.get(href.as_str().unwrap()).header("cookie", &cookie).send().await.unwrap();
    let mut names: Vec<String> =
        mission_testkit::unzip(&archive.bytes().await.unwrap()).into_iter().map(|(name, _)| name).collect();
    names.sort();
    assert_eq!(names, ["mission-logs/stderr.log", "mission-logs/stdout.log", "out.txt"]);

    // A second job, stopped from its page.
    let sleeper = mission(alice, SHELL, &[("sleep.sh", "echo started\nsleep 120\n")], &[]).await;
    let long = alice.run_job_on_station(sleeper.mission_id, local_station(), JobResources::default()).await.unwrap();
    browser.goto(&format!("{}/jobs/{}", server.url, long.job_id)).await;
    browser.wait_for_text("#stdout", "started").await;
    browser.click("#stop").await;
    browser.accept_dialog().await;
    browser.wait_for_text("#job-status", "stopped").await;
    assert_eq!(alice.get_job(long.job_id).await.unwrap().status, JobStatus::Stopped);

    // The list filters by station and state together, from its own form.
    let open = CreateStation { name: "quiet".into(), open: Some(true), ..Default::default() };
    let quiet = admin.create_station(&open).await.unwrap();
    browser.goto(&format!("{}/jobs", server.url)).await;
    assert_eq!(browser.count("#jobs tbody tr").await, 2);
    browser.execute(
        "document.querySelector('#station').value = arguments[0]; document.querySelector('#status').value = 'stopped'",
        serde_json::json!([local_station()]),
    )
    .await;
    browser.click(".filters button").await;
    browser.wait_for_text("h1", "Jobs").await;
    let rows = browser.execute(
        "return [...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job)",
        serde_json::json!([]),
    );
    assert_eq!(rows.await, serde_json::json!([long.job_id]));
    let live = browser.property("#jobs", "dataset").await;
    assert_eq!(live["events"], format!("/api/v1/jobs/events?station_ids={}", local_station()));
    browser.goto(&format!("{}/jobs?station={}", server.url, quiet.station_id)).await;
    browser.wait_for_text("#no-jobs", "No jobs yet").await;
    browser.close().await;
}

#[tokio::test]
async fn the_console_creates_a_mission_uploads_a_folder_and_runs_it() {
    let Some(browser) = mission_testkit::Browser::start().await else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    browser.sign_in_to_console(&server.url, "alice", mission_testkit::PASSWORD).await;

    // A mission of a type, its form drawn from the type's settings; a setting the API refuses
    // comes back marked, with what was typed kept.
    browser.goto(&format!("{}/missions", server.url)).await;
    browser.click("#new-mission").await;
    browser.click(&format!("input[name='type'][value='{SHELL}']")).await;
    browser.type_into("#name", "Folder run").await;
    browser.type_into("input[name='settings.filename']", "../outside.sh").await;
    browser.click("select[name='settings.shell'] option[value='sh']").await;
    browser.type_into("#args", "first\ntwo words").await;
    browser.screenshot("console-new-mission").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());
    browser.click("#save").await;
    browser.wait_for_text("#form-error", "filename").await;
    assert_eq!(browser.property("input[name='settings.filename']", "ariaInvalid").await, "true");
    assert_eq!(browser.property("#name", "value").await, "Folder run");
    browser.clear("input[name='settings.filename']").await;
    browser.type_into("input[name='settings.filename']", "project/run.sh").await;
    browser.click("#save").await;
    browser.wait_for_text("#mission-name", "Folder run").await;
    let mission_id: Uuid = browser.current_url().await.rsplit('/').next().unwrap().parse().unwrap();
    let mission = alice.get_mission_by_id(mission_id).await.unwrap();
    assert_eq!(mission.settings.get("shell").map(String::as_str), Some("sh"));
    assert_eq!(mission.args, ["first", "two words"]);

    // A whole folder, with a nested file, uploaded from the folder picker; then the tree.
    let folder = tempfile::tempdir().unwrap();
    let project = folder.path().join("project");
    std::fs::create_dir_all(project.join("data/nested")).unwrap();
    std::fs::write(project.join("run.sh"), "cat project/data/nested/input.txt\necho \"args: $*\"\nsleep 1\n").unwrap();
    std::fs::write(project.join("data/nested/input.txt"), "nested input\n").unwrap();
    browser.type_into("#pick-folder", project.to_str().unwrap()).await;
    browser.wait_for_text("#file-tree", "input.txt").await;
    let tree = browser.text("#file-tree").await;
    for part in ["project/", "data/", "nested/", "input.txt", "run.sh"] {
        assert!(tree.contains(part), "{part} missing from the tree: {tree}");
    }
    let mut stored: Vec<String> =
        alice.get_mission_files(mission_id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    stored.sort();
    assert_eq!(stored, ["project/data/nested/input.txt", "project/run.sh"]);

    // A folder and a file dragged from outside the browser and dropped on the upload area: the
    // folder is walked, its nested file keeps its path.
    let dragged = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dragged.path().join("extra/deep")).unwrap();
    std::fs::write(dragged.path().join("extra/deep/more.txt"), "more\n").unwrap();
    std::fs::write(dragged.path().join("notes.txt"), "notes\n").unwrap();
    browser.drop_files("#dropzone", &[&dragged.path().join("extra"), &dragged.path().join("notes.txt")]).await;
    browser.wait_for_text("#file-tree", "more.txt").await;
    browser.wait_for_text("#file-tree", "notes.txt").await;
    let mut stored: Vec<String> =
        alice.get_mission_files(mission_id).await.unwrap().iter().map(|f| f.relative_path()).collect();
    stored.sort();
    assert_eq!(stored, ["extra/deep/more.txt", "notes.txt", "project/data/nested/input.txt", "project/run.sh"]);
    browser.screenshot("console-mission-tree").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());

    // The run dialog knows the landing zone's size: more CPUs than it has are refused before
    // anything is sent; a request that fits starts the job, whose page shows its output.
    browser.click("#run-mission").await;
    browser.wait_for_text("#zones", "lz1").await;
    browser.clear("#cpu_count").await;
    browser.type_into("#cpu_count", "64").await;
    browser.wait_for_text("#capacity", "could ever hold").await;
    browser.screenshot("console-run-dialog").await;
    assert_eq!(browser.unlabelled_controls().await, Vec::<String>::new());
    browser.click("#run").await;
    let refused =
        browser.execute("return document.querySelector('#cpu_count').validationMessage", serde_json::json!([])).await;
    assert!(refused.as_str().unwrap().contains("could ever hold"), "{refused}");
    assert!(browser.current_url().await.ends_with("/run"));
    browser.clear("#cpu_count").await;
    browser.type_into("#cpu_count", "1").await;
    browser.wait_for_text("#capacity", "Fits on").await;
    browser.click("#run").await;
    browser.wait_for_text("#job-status", "completed").await;
    assert_eq!(browser.text("#stdout").await, "nested input\nargs: first two words");
    browser.emulate(true, true).await;
    browser.screenshot("console-job-phone-dark").await;
    browser.goto(&format!("{}/missions/{mission_id}", server.url)).await;
    browser.screenshot("console-mission-phone-dark").await;
    browser.emulate(false, true).await;
    browser.screenshot("console-mission-dark").await;
    browser.emulate(false, false).await;
    let jobs = alice.list_jobs(&Default::default()).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!((jobs[0].cpu_count, jobs[0].mission_id), (1, mission_id));

    // Without the script the server refuses the same impossible request, naming the sizes.
    let cookie = format!("mission_session={}", browser.cookie("mission_session").await["value"].as_str().unwrap());
    let csrf = browser.property("meta[name='csrf-token']", "content").await;
    let form = [
        ("csrf", csrf.as_str().unwrap()),
        ("station", LOCAL_STATION),
        ("cpu_count", "64"),
        ("memory_amount", "100"),
        ("gpu_count", "0"),
    ];
    let refused = reqwest::Client::new()
        .post(format!("{}/missions/{mission_id}/run", server.url))
        .header("cookie", &cookie)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let body = refused.text().await.unwrap();
    assert!(body.contains("could ever hold this job") && body.contains("lz1 offers cpu_count 2"), "{body}");

    // Edit, archive and delete, each from the mission's page.
    browser.goto(&format!("{}/missions/{mission_id}", server.url)).await;
    browser.click("#edit-mission").await;
    browser.clear("#name").await;
    browser.type_into("#name", "Folder run, edited").await;
    browser.clear("#args").await;
    browser.click("#save").await;
    browser.wait_for_text("#mission-name", "Folder run, edited").await;
    assert!(alice.get_mission_by_id(mission_id).await.unwrap().args.is_empty());
    browser.click("#archive-mission").await;
    browser.wait_for_text(".heading .badge", "archived").await;
    assert!(alice.get_mission_by_id(mission_id).await.unwrap().archived);
    browser.click("#delete-mission").await;
    browser.accept_dialog().await;
    browser.wait_for_text("h1", "Missions").await;
    assert!(matches!(alice.get_mission_by_id(mission_id).await, Err(Error::NotFound(_))));
    browser.close().await;
}

#[tokio::test]
async fn labels_find_jobs_again_and_change() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let labelled = |pairs: &[(&str, &str)]| -> mission_client::Labels {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    };
    let run = |labels: mission_client::Labels| RunJob { station_id: local_station(), labels, ..Default::default() };
    let a = alice.run_job(m.mission_id, &run(labelled(&[("sweep", "lr"), ("seed", "1")]))).await.unwrap();
    let b = alice.run_job(m.mission_id, &run(labelled(&[("sweep", "lr"), ("seed", "2")]))).await.unwrap();
    let plain = alice.run_job(m.mission_id, &run(labelled(&[]))).await.unwrap();
    assert_eq!(a.labels, labelled(&[("seed", "1"), ("sweep", "lr")]), "the run answers its labels");

    // Filters take every label given; a job's labels come back on it and in listings.
    let with = |pairs: &[(&str, &str)]| ListJobs {
        labels: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..Default::default()
    };
    let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.job_id).collect::<Vec<_>>();
    assert_eq!(ids(alice.list_jobs(&with(&[("sweep", "lr")])).await.unwrap()), [b.job_id, a.job_id]);
    assert_eq!(ids(alice.list_jobs(&with(&[("sweep", "lr"), ("seed", "2")])).await.unwrap()), [b.job_id]);
    assert_eq!(alice.list_jobs(&with(&[("seed", "2")])).await.unwrap()[0].labels, b.labels);
    assert_eq!(ids(alice.list_jobs(&with(&[])).await.unwrap()), [plain.job_id, b.job_id, a.job_id]);

    // Labels change after the run, the whole map at once, even once the job has ended.
    assert_eq!(alice.wait_for_job(a.job_id).await.unwrap().status, JobStatus::Completed);
    let changed = alice.set_job_labels(a.job_id, &labelled(&[("sweep", "lr"), ("keep", "yes")])).await.unwrap();
    assert_eq!(changed.labels, labelled(&[("keep", "yes"), ("sweep", "lr")]));
    assert_eq!(ids(alice.list_jobs(&with(&[("keep", "yes")])).await.unwrap()), [a.job_id]);
    assert_eq!(alice.get_job(a.job_id).await.unwrap().labels, changed.labels);

    // A bad label is a 400 naming it, and nothing is started; another user's job is a 404.
    let bad = alice.run_job(m.mission_id, &run(labelled(&[("bad key", "x")]))).await.unwrap_err();
    let problem = bad.problem().expect("a problem");
    assert_eq!((problem.status, problem.field.as_deref()), (400, Some("labels.bad key")), "{problem:?}");
    let long = "v".repeat(300);
    let bad = alice.set_job_labels(a.job_id, &labelled(&[("note", &long)])).await.unwrap_err();
    assert_eq!(bad.problem().unwrap().field.as_deref(), Some("labels.note"));
    let bad = alice.list_jobs(&with(&[("-x", "1")])).await.unwrap_err();
    assert_eq!(bad.problem().unwrap().field.as_deref(), Some("label"));
    assert_eq!(alice.list_jobs(&ListJobs::default()).await.unwrap().len(), 3, "the refused run started nothing");
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    assert!(matches!(bob.set_job_labels(a.job_id, &labelled(&[])).await, Err(Error::NotFound(_))));
    assert_eq!(alice.get_job(a.job_id).await.unwrap().labels, changed.labels);
}

/// Reads the stream's events until `until` says stop (at most 10 s).
async fn events_until(
    events: &mut mission_client::EventStream,
    mut until: impl FnMut(&mission_client::Event) -> bool,
) -> Vec<mission_client::Event> {
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let event = events.next().await.unwrap();
            let done = until(&event);
            seen.push(event);
            if done {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the events stopped short: {seen:?}"));
    seen
}

#[tokio::test]
async fn the_event_stream_sees_every_transition_in_order_and_resumes() {
    use mission_client::WatchEvents;
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    let mut everything = alice.watch_events(&WatchEvents::default()).await.unwrap();
    let mut bobs = bob.watch_events(&WatchEvents::default()).await.unwrap();

    // A mission, a file, its arguments, a job: each change is an event, in the order it happened.
    let m = mission(alice, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let job = alice.run_job(m.mission_id, &RunJob { station_id: local_station(), ..Default::default() }).await.unwrap();
    let seen = events_until(&mut everything, |e| e.kind == "job.completed").await;
    let kinds: Vec<&str> = seen.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "mission.created",
            "files.changed",
            "mission.updated",
            "job.queued",
            "job.assigned",
            "job.staging",
            "job.running",
            "job.uploading",
            "job.completed"
        ],
        "{seen:#?}"
    );
    assert!(seen.windows(2).all(|w| w[0].seq < w[1].seq), "numbers grow");
    assert_eq!(seen[1].data["path"], "run.sh");
    let completed = seen.last().unwrap();
    assert_eq!((completed.job_id, completed.mission_id), (Some(job.job_id), Some(m.mission_id)));
    assert_eq!(completed.data["exit_code"], 0);
    assert_eq!(completed.job_status(), Some(JobStatus::Completed));
    assert!(seen.iter().all(|e| e.user_id == m.user_id));

    // A client that reconnects after an event gets every later one, the same and in order: with
    // the SDK's `after`, and with the Last-Event-ID header of a browser's EventSource.
    let after = WatchEvents { after: Some(seen[3].seq), ..Default::default() };
    let mut resumed = alice.watch_events(&after).await.unwrap();
    assert_eq!(events_until(&mut resumed, |e| e.kind == "job.completed").await, seen[4..]);
    let token = alice.tokens().await.unwrap().access_token;
    let mut raw = reqwest::Client::new()
        .get(format!("{}/api/v1/events", server.url))
        .bearer_auth(token)
        .header("Last-Event-ID", seen[7].seq.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(raw.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    while !text.contains("job.completed\ndata:") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), raw.chunk()).await.unwrap().unwrap().unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains(&format!("id: {}\nevent: job.completed\n", seen[8].seq)), "{text}");
    assert!(!text.contains("event: job.uploading"), "nothing before the resumed event: {text}");

    // Filters: one job, one kind (a prefix before a dot), a mission.
    let filtered = WatchEvents {
        job_ids: vec![job.job_id],
        kinds: vec!["job.completed".into()],
        after: Some(0),
        ..Default::default()
    };
    let mut only = alice.watch_events(&filtered).await.unwrap();
    assert_eq!(events_until(&mut only, |_| true).await[0], *completed);
    let missions = WatchEvents {
        mission_ids: vec![m.mission_id],
        kinds: vec!["mission".into()],
        after: Some(0),
        ..Default::default()
    };
    let mut only = alice.watch_events(&missions).await.unwrap();
    assert_eq!(events_until(&mut only, |_| true).await[0].kind, "mission.created");

    // Nobody sees another user's events; an admin may ask for everyone's; a bad filter is a 400.
    bob.create_mission(&CreateMission { name: "bob's".into(), ..Default::default() }).await.unwrap();
    let bob_seen = events_until(&mut bobs, |_| true).await;
    assert_eq!((bob_seen[0].kind.as_str(), bob_seen[0].data["name"].as_str()), ("mission.created", Some("bob's")));
    let everyone = WatchEvents { all: true, after: Some(0), ..Default::default() };
    let mut all = admin.watch_events(&everyone).await.unwrap();
    let all_seen = events_until(&mut all, |e| e.data["name"] == "bob's").await;
    assert_eq!(all_seen.len(), seen.len() + 1);
    let refused = bob.watch_events(&everyone).await.unwrap_err();
    assert!(matches!(refused, Error::Forbidden(_)), "{refused:?}");
    let bad = WatchEvents { kinds: vec!["Job!".into()], ..Default::default() };
    let refused = alice.watch_events(&bad).await.unwrap_err();
    assert_eq!(refused.problem().unwrap().field.as_deref(), Some("kinds"));

    // Waiting for a job follows the same stream: a job that ended long ago answers at once.
    assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().status, JobStatus::Completed);
}

#[tokio::test]
async fn a_log_past_its_cap_keeps_its_head_and_tail_around_one_marker() {
    let (server, admin) = cluster(|config| config.job_log_cap = 64 * 1024).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    // 3,000 numbered lines (about 30 KB) with a pause, so a follower joins while it runs.
    let script = "i=0; while [ $i -lt 3000 ]; do echo \"line $i\"; i=$((i+1)); \
                  [ $i = 10 ] && sleep 1; done; echo done >&2\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let expected: String = (0..3000).map(|i| format!("line {i}\n")).collect();
    let run = |log_cap| RunJob { station_id: local_station(), log_cap, ..Default::default() };

    // A cap under the least, or over the server's, is refused naming the field.
    for cap in [100, 64 * 1024 + 1] {
        let refused = alice.run_job(m.mission_id, &run(Some(cap))).await.unwrap_err();
        assert_eq!(refused.problem().and_then(|p| p.field.as_deref()), Some("log_cap"), "{refused}");
    }

    let job = alice.run_job(m.mission_id, &run(Some(4096))).await.unwrap();
    assert_eq!((job.log_cap, job.log_truncated), (Some(4096), false));
    let mut followed = String::new();
    alice.follow_job_logs(job.job_id, LogStream::Stdout, |s| followed.push_str(s)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert!(done.log_truncated, "{done:?}");

    // The head, one marker, the last quarter-cap; a follower saw exactly that, in order.
    let marker = mission_server::job_logs::truncation_marker(4096);
    let kept = format!("{}{marker}{}", &expected[..4096], &expected[expected.len() - 1024..]);
    let log = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert_eq!(log, kept);
    assert_eq!(followed, kept);
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap(), "done\n");
    // The log among the job's results is the same.
    let results = tempfile::tempdir().unwrap();
    alice.download_job_results(job.job_id, results.path()).await.unwrap();
    assert_eq!(std::fs::read_to_string(results.path().join("mission-logs/stdout.log")).unwrap(), kept);

    // Without a cap of its own, a job gets the server's, and its 30 KB fit.
    let plain = alice.wait_for_job(alice.run_job(m.mission_id, &run(None)).await.unwrap().job_id).await.unwrap();
    assert!(!plain.log_truncated);
    assert_eq!(alice.job_logs(plain.job_id, LogStream::Stdout).await.unwrap(), expected);
}

#[tokio::test]
async fn a_finished_job_reports_what_it_used() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    // 200 MB held at once (each page touched), and about a second of one CPU busy.
    let py = "import time\nx = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\n\
              end = time.process_time() + 1.0\nwhile time.process_time() < end: pass\nprint('done')\n";
    let m = mission(alice, PYTHON, &[("use.py", py)], &[]).await;
    let before = chrono::Utc::now();
    let resources = JobResources { cpu_count: Some(2), memory_amount: Some(1024), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), resources).await.unwrap();
    assert_eq!(job.usage, None, "a queued job has used nothing yet");
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let usage = done.usage.clone().expect("a finished job says what it used");
    let ran = (done.finished_at.unwrap() - done.started_at.unwrap()).as_seconds_f64();
    assert!(usage.wall_time >= 1.0 && usage.wall_time <= ran + 0.5, "{usage:?}, ran {ran} s");
    if ran_without_limits("the measured figures of a_finished_job_reports_what_it_used", &done) {
        return;
    }
    let cpu = usage.cpu_time.expect("CPU time from the cgroup");
    assert!((1.0..usage.wall_time + 0.1).contains(&cpu), "{usage:?}");
    let efficiency = usage.cpu_efficiency.unwrap();
    assert!((efficiency - cpu / (2.0 * usage.wall_time)).abs() < 1e-9 && efficiency < 0.55, "{usage:?}");
    let peak = usage.peak_memory.expect("peak memory from the cgroup");
    assert!((200..320).contains(&peak), "peak {peak} MB for 200 MB held");
    // Its energy is modelled from that CPU time and what it held, by the station's (default)
    // settings: 12 W a busy core, 0.3725 W a GB held, PUE 1.67; 475 g CO2e a kWh; no prices.
    let hours = usage.wall_time / 3600.0;
    let modelled = (cpu / 3600.0 * 12.0 + 1.024 * hours * 0.3725) * 1.67 / 1000.0;
    let energy = usage.energy_kwh.expect("reckoned as it ended");
    assert!((energy - modelled).abs() < 1e-12, "{usage:?}: {modelled} kWh");
    assert!((usage.co2e_g.unwrap() - energy * 475.0).abs() < 1e-9 && usage.cost.is_none(), "{usage:?}");

    // The summary: it asked for 1024 MB and used about 200, so it over-requested.
    let summary = alice.job_usage(&mission_client::UsageQuery::default()).await.unwrap();
    assert_eq!((summary.jobs, summary.over_requested_memory), (1, 1), "{summary:?}");
    assert!((summary.cpu_hours * 3600.0 - cpu).abs() < 1e-6, "{summary:?}");
    assert!((summary.cpu_hours_held * 3600.0 - 2.0 * usage.wall_time).abs() < 1e-6, "{summary:?}");
    assert!((summary.mean_cpu_efficiency.unwrap() - efficiency).abs() < 1e-9, "{summary:?}");
    assert!((summary.energy_kwh - energy).abs() < 1e-12 && (summary.co2e_g - energy * 475.0).abs() < 1e-9);
    let of = |mission_ids, since| mission_client::UsageQuery { mission_ids, since };
    assert_eq!(alice.job_usage(&of(vec![m.mission_id], Some(before))).await.unwrap(), summary);
    assert_eq!(alice.job_usage(&of(vec![], Some(chrono::Utc::now()))).await.unwrap().jobs, 0);
    assert_eq!(alice.job_usage(&of(vec![Uuid::new_v4()], None)).await.unwrap().jobs, 0);
    // Another user's summary does not count it.
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    assert_eq!(bob.job_usage(&of(vec![], None)).await.unwrap().jobs, 0);
}

#[tokio::test]
async fn queued_jobs_say_why_they_wait_and_dependencies_chain_or_fail() {
    let (server, admin) = cluster(|config| config.max_running_jobs_per_user = Some(2)).await;
    let alice = &server.client;
    let sleeper = mission(alice, SHELL, &[("run.sh", "sleep 3\n")], &[]).await;
    let failing = mission(alice, SHELL, &[("run.sh", "exit 3\n")], &[]).await;
    let quick = mission(alice, SHELL, &[("run.sh", "echo done\n")], &[]).await;
    let run = |mission: &Mission, cpus: u32, after_ok: Vec<Uuid>, after_any: Vec<Uuid>| {
        let request =
            RunJob { station_id: local_station(), cpu_count: Some(cpus), after_ok, after_any, ..Default::default() };
        let mission_id = mission.mission_id;
        async move { alice.run_job(mission_id, &request).await.unwrap() }
    };
    let reason = |job_id: Uuid| async move {
        let job = alice.get_job(job_id).await.unwrap();
        job.pending_reason.map(|p| (p.kind, p.detail))
    };
    let until_reason = |job_id: Uuid, kind: PendingKind| async move {
        let last = std::sync::Mutex::new(None);
        wait_until_explained(
            &format!("job {job_id} waits for {kind:?}"),
            || async {
                let now = reason(job_id).await;
                let there = now.as_ref().is_some_and(|(k, _)| *k == kind);
                *last.lock().unwrap() = now;
                there
            },
            || format!("it says {:?}", last.lock().unwrap()),
        )
        .await;
        reason(job_id).await.unwrap().1
    };

    // No landing zone online: the station's only one was registered, never started.
    admin
        .register_landing_zone(local_station(), &RegisterLandingZone { name: "asleep".into(), cluster_account: None })
        .await
        .unwrap();
    let first = run(&sleeper, 1, vec![], vec![]).await;
    let detail = until_reason(first.job_id, PendingKind::NoLandingZone).await;
    assert_eq!(detail, "no landing zone of its station is online");

    // One 2-CPU LZ: the first runs; a 2-CPU job waits for room there, holding it; a 1-CPU job
    // behind it is behind it; one that waits for the first says so.
    let a = Agent::start(&server, &admin, local_station(), "a", TWO_CPUS).await;
    wait_status(alice, first.job_id, JobStatus::Running).await;
    assert_eq!(reason(first.job_id).await, None, "a running job waits for nothing");
    let wide = run(&sleeper, 2, vec![], vec![]).await;
    let detail = until_reason(wide.job_id, PendingKind::Resources).await;
    assert!(detail.contains("2 CPUs") && detail.contains("landing zone a"), "{detail}");
    let narrow = run(&sleeper, 1, vec![], vec![]).await;
    let detail = until_reason(narrow.job_id, PendingKind::Priority).await;
    assert!(detail.starts_with("behind 1 earlier queued job of its station"), "{detail}");
    let after_first = run(&quick, 1, vec![first.job_id], vec![]).await;
    let detail = until_reason(after_first.job_id, PendingKind::Dependency).await;
    assert_eq!(detail, format!("waiting for job {} to complete", first.job_id));

    // A second LZ with room: the wide job starts there, and alice is at her limit of two.
    let _b = Agent::start(&server, &admin, local_station(), "b", Offer { cpus: 4, ..TWO_CPUS }).await;
    wait_status(alice, wide.job_id, JobStatus::Running).await;
    let detail = until_reason(narrow.job_id, PendingKind::Quota).await;
    assert!(detail.contains("2 jobs on landing zones"), "{detail}");
    // The listing shows the same reasons.
    let listed = alice.list_jobs_page(&ListJobs { items: 10, ..Default::default() }).await.unwrap();
    let shown = listed.jobs.iter().find(|j| j.job_id == narrow.job_id).unwrap();
    assert_eq!(shown.pending_reason.as_ref().map(|p| p.kind), Some(PendingKind::Quota));

    // The chain completes in order: the dependent starts only after the first completed.
    let after_first = alice.wait_for_job(after_first.job_id).await.unwrap();
    let first = alice.get_job(first.job_id).await.unwrap();
    assert_eq!((first.status, after_first.status), (JobStatus::Completed, JobStatus::Completed));
    assert!(after_first.started_at.unwrap() >= first.finished_at.unwrap(), "{after_first:?}");
    assert_eq!(after_first.after_ok, [first.job_id]);
    assert_eq!(alice.wait_for_job(narrow.job_id).await.unwrap().status, JobStatus::Completed);

    // A failed dependency: who needed it to complete fails without running, naming it; who only
    // needed it to end runs.
    let broken = run(&failing, 1, vec![], vec![]).await;
    let needs_ok = run(&quick, 1, vec![broken.job_id], vec![]).await;
    let needs_end = run(&quick, 1, vec![], vec![broken.job_id]).await;
    let needs_ok = alice.wait_for_job(needs_ok.job_id).await.unwrap();
    assert_eq!(alice.get_job(broken.job_id).await.unwrap().status, JobStatus::Failed);
    assert_eq!(needs_ok.status, JobStatus::Failed);
    assert_eq!(needs_ok.reason, Some(format!("the job it waited for, {}, ended failed", broken.job_id)));
    assert_eq!((needs_ok.started_at, needs_ok.lz_id), (None, None), "it never ran");
    assert_eq!(alice.wait_for_job(needs_end.job_id).await.unwrap().status, JobStatus::Completed);
    // Once failed, a new job that needs it to complete fails at once.
    let doomed = run(&quick, 1, vec![broken.job_id], vec![]).await;
    assert_eq!(doomed.status, JobStatus::Failed);

    // Jobs that are not yours, or not jobs at all, are refused naming the field.
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    let bobs = mission(&bob, SHELL, &[("run.sh", "true\n")], &[]).await;
    let request = RunJob { station_id: local_station(), after_ok: vec![broken.job_id], ..Default::default() };
    let err = bob.run_job(bobs.mission_id, &request).await.unwrap_err();
    assert!(matches!(&err, Error::Api(p) if p.status == 400 && p.detail.contains("after_ok")), "{err:?}");
    let both = RunJob { after_any: vec![broken.job_id], ..request };
    let err = alice.run_job(quick.mission_id, &both).await.unwrap_err();
    assert!(matches!(&err, Error::Api(p) if p.status == 400 && p.detail.contains("name it once")), "{err:?}");
    drop(a);
}

/// A retry policy of `max_attempts` on `on`, the rest its defaults but for the given fields.
fn retry_policy(max_attempts: u32, on: &[RetryOn]) -> RetryPolicy {
    RetryPolicy { max_attempts, on: on.to_vec(), backoff: 0, memory_factor: 1.5, max_memory: None }
}

#[tokio::test]
async fn an_out_of_memory_job_is_retried_with_more_memory_until_it_fits() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    // 150 MB held: too much for 64 MB and for 128 MB, not for 256 MB.
    let py = "print('try', flush=True)\nx = bytearray(150 * 1024 * 1024)\n\
              for i in range(0, len(x), 4096): x[i] = 1\nprint('survived')\n";
    let m = mission(alice, PYTHON, &[("eat.py", py)], &[]).await;
    let policy = RetryPolicy { memory_factor: 2.0, max_memory: Some(256), ..retry_policy(3, &[RetryOn::OutOfMemory]) };
    let request = RunJob {
        station_id: local_station(),
        memory_amount: Some(64),
        retry: Some(policy.clone()),
        ..Default::default()
    };
    let job = alice.run_job(m.mission_id, &request).await.unwrap();
    assert_eq!((job.attempt, job.retry.as_ref()), (1, Some(&policy)));
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    if ran_without_limits("an_out_of_memory_job_is_retried_with_more_memory_until_it_fits", &done) {
        return;
    }
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!((done.attempt, done.memory_amount), (3, 256), "{done:?}");
    let retries: Vec<&str> =
        done.history.iter().filter(|t| t.status == JobStatus::Queued).filter_map(|t| t.detail.as_deref()).collect();
    assert_eq!(
        retries,
        [
            "attempt 1 of 3 failed (out of memory); attempt 2 asks for 128 MB of memory",
            "attempt 2 of 3 failed (out of memory); attempt 3 asks for 256 MB of memory",
        ],
        "{done:?}"
    );
    // Each attempt's output follows the last one's in the one log.
    let stdout = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert_eq!(stdout, "try\ntry\ntry\nsurvived\n");

    // A failure the policy does not name ends the job; one it names waits out its backoff.
    let failing = mission(alice, SHELL, &[("run.sh", "echo no >&2\nexit 3\n")], &[]).await;
    let not_named = RunJob { retry: Some(retry_policy(3, &[RetryOn::OutOfMemory])), ..request.clone() };
    let ended = alice.run_job(failing.mission_id, &not_named).await.unwrap();
    let ended = alice.wait_for_job(ended.job_id).await.unwrap();
    assert_eq!((ended.status, ended.attempt, ended.reason.as_deref()), (JobStatus::Failed, 1, Some("exit status 3")));
    let backing_off = RetryPolicy { backoff: 2, ..retry_policy(2, &[RetryOn::ExitCode]) };
    let request = RunJob { retry: Some(backing_off), ..request.clone() };
    let job = alice.run_job(failing.mission_id, &request).await.unwrap();
    wait_until("the retry waits out its backoff", || async {
        let job = alice.get_job(job.job_id).await.unwrap();
        job.attempt == 2 && job.pending_reason.is_some_and(|p| p.kind == PendingKind::Backoff)
    })
    .await;
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    assert_eq!((done.status, done.attempt, done.exit_code), (JobStatus::Failed, 2, Some(3)), "{done:?}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap(), "no\nno\n");
    let retried = done.history.iter().find(|t| t.status == JobStatus::Queued && t.detail.is_some()).unwrap();
    assert_eq!(retried.detail.as_deref(), Some("attempt 1 of 2 failed (exit status 3); attempt 2, after 2 s"));

    // A mission's default policy applies to jobs that name none; a bad policy is refused.
    let default = retry_policy(2, &[RetryOn::ExitCode]);
    let update = mission_client::UpdateMission { retry: Some(default.clone()), ..Default::default() };
    assert!(alice.update_mission(failing.mission_id, &update).await.unwrap());
    let plain = RunJob { station_id: local_station(), ..Default::default() };
    let job = alice.run_job(failing.mission_id, &plain).await.unwrap();
    assert_eq!(job.retry, Some(default));
    let bad = RunJob { retry: Some(retry_policy(0, &[RetryOn::Lost])), ..plain.clone() };
    let refused = alice.run_job(failing.mission_id, &bad).await.unwrap_err().to_string();
    assert!(refused.contains("retry.max_attempts: expected 1 to 20 attempts"), "{refused}");
    assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().attempt, 2);
}

#[tokio::test]
async fn rerun_starts_failed_jobs_again_and_leaves_completed_ones_alone() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "if [ -e fail ]; then exit 3; fi\necho ok\n")], &[]).await;
    let run = |after_ok: Vec<Uuid>| RunJob { station_id: local_station(), after_ok, ..Default::default() };
    let completed = alice.run_job(m.mission_id, &run(vec![])).await.unwrap();
    assert_eq!(alice.wait_for_job(completed.job_id).await.unwrap().status, JobStatus::Completed);
    let marker = tempfile::tempdir().unwrap();
    std::fs::write(marker.path().join("fail"), "").unwrap();
    assert!(alice.upload(m.mission_id, marker.path().join("fail"), None, false).await.unwrap());
    let failed = alice.run_job(m.mission_id, &run(vec![])).await.unwrap();
    let dependent = alice.run_job(m.mission_id, &run(vec![failed.job_id])).await.unwrap();
    assert_eq!(alice.wait_for_job(dependent.job_id).await.unwrap().status, JobStatus::Failed);
    let running = alice.rerun_job(dependent.job_id).await;
    assert!(running.is_ok(), "an ended job may be rerun, whatever its status: {running:?}");
    let rerun_of_dependent = running.unwrap();
    assert_eq!(alice.wait_for_job(rerun_of_dependent.job_id).await.unwrap().status, JobStatus::Failed);

    // With the cause gone, the mission's failed jobs run again: the one that failed, and the
    // dependent (once, though it was rerun by hand already: only its rerun has not been), which
    // now waits for the rerun of what it waited for.
    assert!(alice.delete_file(m.mission_id, "fail").await.unwrap());
    let reruns = alice.rerun_failed_jobs(m.mission_id).await.unwrap();
    let of: Vec<Option<Uuid>> = reruns.iter().map(|j| j.rerun_of).collect();
    assert_eq!(of, [Some(failed.job_id), Some(rerun_of_dependent.job_id)], "{reruns:?}");
    assert_eq!(reruns[1].after_ok, [reruns[0].job_id]);
    for job in &reruns {
        assert_eq!(alice.wait_for_job(job.job_id).await.unwrap().status, JobStatus::Completed);
    }
    assert!(alice.rerun_failed_jobs(m.mission_id).await.unwrap().is_empty(), "nothing failed is left");
    let all = alice.list_jobs(&ListJobs { mission_ids: vec![m.mission_id], ..Default::default() }).await.unwrap();
    assert_eq!(all.iter().filter(|j| j.rerun_of == Some(completed.job_id)).count(), 0);

    // A job that has not ended cannot be rerun; another user's is not found.
    let slow = mission(alice, SHELL, &[("run.sh", "sleep 30\n")], &[]).await;
    let busy = alice.run_job(slow.mission_id, &run(vec![])).await.unwrap();
    let refused = alice.rerun_job(busy.job_id).await.unwrap_err();
    assert!(matches!(&refused, Error::Api(p) if p.status == 409), "{refused:?}");
    alice.stop_job(busy.job_id).await.unwrap();
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    assert!(matches!(bob.rerun_job(failed.job_id).await.unwrap_err(), Error::NotFound(_)));
    let refused = bob.rerun_failed_jobs(m.mission_id).await.unwrap_err();
    assert!(matches!(refused, Error::NotFound(_) | Error::Forbidden(_)), "{refused:?}");
}

#[tokio::test]
async fn a_job_array_runs_each_element_with_its_index_and_is_followed_and_stopped_as_one() {
    let (server, admin) = cluster(|_| {}).await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    let script = "echo \"$MISSION_ARRAY_INDEX $*\"\nif [ \"$MISSION_ARRAY_INDEX\" = 7 ]; then exit 1; fi\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &["base"]).await;
    let run = RunJob { station_id: local_station(), cpu_count: Some(1), memory_amount: Some(32), ..Default::default() };
    let request = mission_client::RunJobArray {
        run: run.clone(),
        range: Some("1-100".into()),
        arguments: vec!["--seed".into(), "{}".into()],
        argument_sets: Vec::new(),
    };
    let array = alice.run_job_array(m.mission_id, &request).await.unwrap();
    assert_eq!((array.size, array.mission_id), (100, m.mission_id));
    // Quick elements may have ended already; every one is counted once.
    let counted = array.queued + array.running + array.completed + array.failed + array.stopped;
    assert_eq!(counted, 100, "{array:?}");
    wait_until("every element ended", || async {
        let a = alice.get_job_array(array.array_id).await.unwrap();
        a.queued + a.running == 0
    })
    .await;
    let done = alice.get_job_array(array.array_id).await.unwrap();
    assert_eq!((done.completed, done.failed, done.stopped), (99, 1, 0), "{done:?}");
    let of_array = |statuses: Vec<JobStatus>| ListJobs {
        array_ids: vec![array.array_id],
        statuses,
        items: 200,
        ..Default::default()
    };
    let failed = alice.list_jobs(&of_array(vec![JobStatus::Failed])).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].array_index, Some(7));
    assert_eq!(alice.job_logs(failed[0].job_id, LogStream::Stdout).await.unwrap(), "7 base --seed 7\n");
    let all = alice.list_jobs(&of_array(vec![])).await.unwrap();
    let mut indices: Vec<u32> = all.iter().filter_map(|j| j.array_index).collect();
    indices.sort_unstable();
    assert_eq!(indices, (1..=100).collect::<Vec<_>>());
    assert!(all.iter().all(|j| j.array_id == Some(array.array_id)));
    // Rerun of the failed elements keeps their index.
    let reruns = alice.rerun_failed_jobs(m.mission_id).await.unwrap();
    assert_eq!(reruns.iter().map(|j| j.array_index).collect::<Vec<_>>(), [Some(7)]);
    alice.wait_for_job(reruns[0].job_id).await.unwrap();

    // Argument sets, stopped as a group while they wait and run.
    let slow = mission(alice, SHELL, &[("run.sh", "sleep 30\n")], &[]).await;
    let sets = (0..5).map(|i| vec![format!("set-{i}")]).collect();
    let request = mission_client::RunJobArray { run, range: None, arguments: Vec::new(), argument_sets: sets };
    let array = alice.run_job_array(slow.mission_id, &request).await.unwrap();
    assert_eq!(array.size, 5);
    let stopped = alice.stop_job_array(array.array_id).await.unwrap();
    assert_eq!(stopped.size, 5);
    wait_until("the stopped array ended", || async { alice.get_job_array(array.array_id).await.unwrap().stopped == 5 })
        .await;

    // Bad arrays are refused, naming the field; another user's array is not found.
    for (range, sets, field) in [
        (Some("5-1"), vec![], "range"),
        (Some("0-1000000"), vec![], "range"),
        (None, vec![], "range"),
        (Some("1-2"), vec![vec!["x".to_owned()]], "range"),
    ] {
        let bad = mission_client::RunJobArray {
            run: RunJob { station_id: local_station(), ..Default::default() },
            range: range.map(str::to_owned),
            arguments: Vec::new(),
            argument_sets: sets,
        };
        let refused = alice.run_job_array(m.mission_id, &bad).await.unwrap_err();
        assert!(matches!(&refused, Error::Api(p) if p.field.as_deref() == Some(field)), "{refused:?}");
    }
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    assert!(matches!(bob.get_job_array(array.array_id).await.unwrap_err(), Error::NotFound(_)));
    assert!(matches!(bob.stop_job_array(array.array_id).await.unwrap_err(), Error::NotFound(_)));
}
