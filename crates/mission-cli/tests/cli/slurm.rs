//! The Slurm runner against a real Slurm: `scripts/slurm-test-cluster.sh` runs a one-node cluster
//! on this machine (two CPUs, two fake GPUs, cgroup limits), and `scripts/test.sh` names it in
//! `MISSION_TEST_SLURM_CONF`. Every test runs its own server and `mission lz --runner slurm`
//! agent; they share the one node, so a job may wait in Slurm's queue behind another test's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mission_client::{Client, Job, JobResources, JobStatus, LogStream, PendingKind, RegisterLandingZone};
use mission_testkit::TestServer;
use tokio::process::{Child, Command};
use uuid::Uuid;

use super::BIN;
use super::jobs::{PYTHON, SHELL, cluster, local_station, mission, wait_until, wait_until_explained};

/// The test cluster's `slurm.conf`, or `None` (the test is skipped) where there is none and
/// none is required.
fn slurm_conf(test: &str) -> Option<String> {
    match std::env::var("MISSION_TEST_SLURM_CONF") {
        Ok(conf) => Some(conf),
        Err(_) => {
            let why = format!(
                "{test}: MISSION_TEST_SLURM_CONF names no test cluster (scripts/slurm-test-cluster.sh starts one)"
            );
            mission_testkit::skip_unless_required("SLURM", why);
            None
        }
    }
}

/// A Slurm landing zone's agent, with its dirs.
struct SlurmAgent {
    child: Child,
    lz_id: Uuid,
    token: String,
    conf: String,
    server_url: String,
    /// `data/` (the agent's state) and `work/` (the work root; the cluster's shared filesystem).
    dir: tempfile::TempDir,
    /// More flags for `mission lz`.
    extra: Vec<String>,
}

impl SlurmAgent {
    /// Registers the LZ `name` on the local station as a gateway for the test's account, and
    /// starts its agent; waits until it is online.
    async fn start(server: &TestServer, admin: &Client, name: &str, conf: &str) -> Self {
        Self::start_with(server, admin, name, conf, &[]).await
    }

    /// Like [`SlurmAgent::start`], with `extra` flags for `mission lz`.
    async fn start_with(server: &TestServer, admin: &Client, name: &str, conf: &str, extra: &[&str]) -> Self {
        let agent = Self::spawned(server, admin, name, conf, &whoami(), extra).await;
        agent.until_online(admin).await;
        agent
    }

    /// Registers the LZ `name` as a gateway for `account`, and starts its agent with `extra`
    /// flags.
    async fn spawned(
        server: &TestServer,
        admin: &Client,
        name: &str,
        conf: &str,
        account: &str,
        extra: &[&str],
    ) -> Self {
        let request = RegisterLandingZone { name: name.into(), cluster_account: Some(account.into()) };
        let registered = admin.register_landing_zone(local_station(), &request).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut agent = Self {
            child: Command::new("true").spawn().unwrap(),
            lz_id: registered.landing_zone.lz_id,
            token: registered.token,
            conf: conf.to_owned(),
            server_url: server.url.clone(),
            dir,
            extra: extra.iter().map(|flag| (*flag).to_owned()).collect(),
        };
        agent.spawn();
        agent
    }

    /// Kills the agent and starts it again; waits until it is online.
    async fn restart(&mut self, admin: &Client) {
        self.child.kill().await.unwrap();
        self.spawn();
        self.until_online(admin).await;
    }

    fn spawn(&mut self) {
        self.child = Command::new(BIN)
            .args(["lz", "--server", &self.server_url, "--runner", "slurm", "--work-root"])
            .arg(self.work_root())
            .arg("--data-dir")
            .arg(self.dir.path().join("data"))
            .args(["--max-jobs", "20", "--poll-max", "2"])
            .args(&self.extra)
            .env("MISSION_LZ_TOKEN", &self.token)
            .env("SLURM_CONF", &self.conf)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.path().join("agent.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
    }

    async fn until_online(&self, admin: &Client) {
        let online = || async {
            let lzs = admin.list_landing_zones(local_station()).await.unwrap();
            lzs.iter().any(|lz| lz.lz_id == self.lz_id && lz.online && lz.resources.is_some())
        };
        wait_until_explained("the Slurm agent is online", online, || self.log()).await;
    }

    /// What the agent logged.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default();
        format!("agent log:\n{log}")
    }

    fn work_root(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The dir a job runs in.
    fn work_dir(&self, job_id: Uuid) -> PathBuf {
        self.work_root().join(job_id.to_string()).join("work")
    }
}

/// The account the tests run as.
fn whoami() -> String {
    let out = std::process::Command::new("id").arg("-un").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The Slurm job id a running job's limits name.
fn slurm_id(job: &Job) -> String {
    let limits = job.limits.as_deref().unwrap_or_default();
    let id = limits.strip_prefix("Slurm job ").and_then(|rest| rest.split(':').next());
    id.unwrap_or_else(|| panic!("no Slurm job in the limits: {job:?}")).to_owned()
}

/// `scontrol show job -d ID`, as `Key=Value` words.
async fn scontrol(conf: &str, slurm_id: &str) -> String {
    let out = Command::new("scontrol").args(["show", "job", "-d", slurm_id]).env("SLURM_CONF", conf).output().await;
    String::from_utf8_lossy(&out.unwrap().stdout).into_owned()
}

/// Waits until the job runs (in Slurm), for as long as other tests' jobs may hold the node.
async fn until_running(client: &Client, job_id: Uuid) -> Job {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let job = client.get_job(job_id).await.unwrap();
        if job.status == JobStatus::Running || job.status.is_final() {
            return job;
        }
        assert!(tokio::time::Instant::now() < deadline, "job {job_id} did not start: {job:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the job ends, for as long as Slurm may take.
async fn until_ended(client: &Client, job_id: Uuid) -> Job {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(400);
    loop {
        let job = client.get_job(job_id).await.unwrap();
        if job.status.is_final() {
            return job;
        }
        assert!(tokio::time::Instant::now() < deadline, "job {job_id} did not end: {job:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn released(path: &Path) {
    std::fs::write(path, "").unwrap();
}

#[tokio::test]
async fn shell_and_python_missions_run_through_slurm_with_their_resources() {
    let Some(conf) = slurm_conf("shell_and_python_missions_run_through_slurm_with_their_resources") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let lz = admin.list_landing_zones(local_station()).await.unwrap().into_iter().find(|l| l.lz_id == agent.lz_id);
    let offered = lz.unwrap().resources.unwrap();
    assert_eq!((offered.cpu_count, offered.gpu_count), (2, 2), "the node's CPUs and fake GPUs, from sinfo");
    let alice = &server.client;

    let script = "echo \"out $1 $MISSION_ID\"\necho err >&2\necho \"gpus=$CUDA_VISIBLE_DEVICES\"\n\
                  while [ ! -e go ]; do sleep 0.1; done\nrm go\necho done > result.txt\nmkdir -p sub && echo n > sub/n.txt\n";
    let shell = mission(alice, SHELL, &[("run.sh", script), ("data/in.txt", "input")], &["arg1"]).await;
    let asked = JobResources {
        cpu_count: Some(2),
        memory_amount: Some(300),
        gpu_count: Some(1),
        time_limit: Some(5),
        ..Default::default()
    };
    let job = alice.run_job_on_station(shell.mission_id, local_station(), asked).await.unwrap();
    let running = until_running(alice, job.job_id).await;
    assert_eq!(running.status, JobStatus::Running, "{running:?}");
    let shown = scontrol(&conf, &slurm_id(&running)).await;
    for expected in [
        format!("JobName=mission-{}", job.job_id),
        "NumCPUs=2".into(),
        "mem=300M".into(),
        "TimeLimit=00:05:00".into(),
        "gres:gpu:1".into(),
        format!("WorkDir={}", agent.work_dir(job.job_id).display()),
    ] {
        assert!(shown.contains(&expected), "{expected} not in:\n{shown}");
    }
    // Output streams while the job runs.
    wait_until("stdout arrives while the job runs", || async {
        alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap().starts_with("out arg1")
    })
    .await;
    released(&agent.work_dir(job.job_id).join("go"));
    let done = until_ended(alice, job.job_id).await;
    assert_eq!((done.status, done.exit_code), (JobStatus::Completed, Some(0)), "{done:?}");
    let stdout = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert_eq!(stdout, format!("out arg1 {}\ngpus=0\n", shell.mission_id));
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap(), "err\n");
    let mut results: Vec<String> =
        alice.list_job_results(job.job_id).await.unwrap().iter().map(|f| f.relative_path().to_owned()).collect();
    results.sort();
    assert_eq!(results, ["mission-logs/stderr.log", "mission-logs/stdout.log", "result.txt", "sub/n.txt"]);
    assert!(!agent.work_root().join(job.job_id.to_string()).exists(), "the job's dir is removed");

    let py = "import sys\nprint('py', sys.argv[1:])\nopen('out.txt', 'w').write('x')\nsys.exit(3)\n";
    let python = mission(alice, PYTHON, &[("main.py", py)], &["a"]).await;
    let job = alice.run_job_on_station(python.mission_id, local_station(), JobResources::default()).await.unwrap();
    let done = until_ended(alice, job.job_id).await;
    assert_eq!(
        (done.status, done.exit_code, done.reason.as_deref()),
        (JobStatus::Failed, Some(3), Some("exit status 3"))
    );
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "py ['a']\n");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "out.txt"), "{results:?}");
}

#[tokio::test]
async fn a_stop_cancels_the_slurm_job_and_a_waiting_job_shows_slurms_reason() {
    let Some(conf) = slurm_conf("a_stop_cancels_the_slurm_job_and_a_waiting_job_shows_slurms_reason") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo started\nexec sleep 600\n")], &[]).await;
    let whole_node = JobResources { cpu_count: Some(2), memory_amount: Some(100), ..Default::default() };
    let first = alice.run_job_on_station(m.mission_id, local_station(), whole_node).await.unwrap();
    let running = until_running(alice, first.job_id).await;
    let first_slurm_id = slurm_id(&running);
    // The second needs the node the first holds: it waits in Slurm's queue, and says why.
    let second = alice.run_job_on_station(m.mission_id, local_station(), whole_node).await.unwrap();
    wait_until("the waiting job shows Slurm's pending reason", || async {
        let job = alice.get_job(second.job_id).await.unwrap();
        job.status == JobStatus::Staging
            && job.pending_reason.is_some_and(|p| {
                p.kind == PendingKind::BatchSystem && p.detail.starts_with("waiting in Slurm's queue: ")
            })
    })
    .await;
    let waiting = alice.get_job(second.job_id).await.unwrap();
    assert_eq!(waiting.reason, None, "a reason says why a job ended");
    let reason = waiting.pending_reason.unwrap().detail;
    assert!(["Resources", "Priority"].iter().any(|r| reason.ends_with(r)), "{reason}");
    alice.stop_job(second.job_id).await.unwrap();
    alice.stop_job(first.job_id).await.unwrap();
    for job_id in [first.job_id, second.job_id] {
        let stopped = until_ended(alice, job_id).await;
        assert_eq!(stopped.status, JobStatus::Stopped, "{stopped:?}");
    }
    let shown = scontrol(&conf, &first_slurm_id).await;
    assert!(shown.contains("JobState=CANCELLED"), "{shown}");
    wait_until("the agent removed the stopped jobs' dirs", || async {
        std::fs::read_dir(agent.work_root()).unwrap().next().is_none()
    })
    .await;
}

#[tokio::test]
async fn a_finished_slurm_job_reports_what_accounting_measured() {
    let Some(conf) = slurm_conf("a_finished_slurm_job_reports_what_accounting_measured") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    // 200 MB held (each page touched) while one CPU is busy for 2 s: the node samples each
    // second, so accounting sees the memory at least once.
    let py = "import time\nx = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\n\
              end = time.process_time() + 2.0\nwhile time.process_time() < end: pass\nprint('done')\n";
    let m = mission(alice, PYTHON, &[("use.py", py)], &[]).await;
    let resources = JobResources { cpu_count: Some(1), memory_amount: Some(1024), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), resources).await.unwrap();
    let done = until_ended(alice, job.job_id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    let usage = done.usage.expect("sacct says what the job used");
    let ran = (done.finished_at.unwrap() - done.started_at.unwrap()).as_seconds_f64();
    assert!(usage.wall_time >= 2.0 && usage.wall_time <= ran + 0.5, "{usage:?}, ran {ran} s");
    assert!(usage.wall_time.fract() != 0.0, "timed by the script's clock, not Slurm's whole seconds: {usage:?}");
    let cpu = usage.cpu_time.expect("CPU time from sacct");
    assert!((2.0..usage.wall_time + 0.1).contains(&cpu), "{usage:?}");
    let efficiency = usage.cpu_efficiency.expect("efficiency over the one CPU it held");
    assert!((efficiency - cpu / usage.wall_time).abs() < 1e-9 && efficiency > 0.5, "{usage:?}");
    let peak = usage.peak_memory.expect("peak memory from sacct's MaxRSS");
    assert!((200..330).contains(&peak), "peak {peak} MB for 200 MB held");
}

#[tokio::test]
async fn out_of_memory_and_time_limit_end_slurm_jobs_with_their_reasons() {
    let Some(conf) = slurm_conf("out_of_memory_and_time_limit_end_slurm_jobs_with_their_reasons") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let _agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    let py = "x = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')\n";
    let eater = mission(alice, PYTHON, &[("eat.py", py)], &[]).await;
    let small = JobResources { memory_amount: Some(64), ..Default::default() };
    let oom = alice.run_job_on_station(eater.mission_id, local_station(), small).await.unwrap();
    let sleeper = mission(alice, SHELL, &[("run.sh", "echo partial > part.txt\nexec sleep 600\n")], &[]).await;
    let one_minute = JobResources { memory_amount: Some(64), time_limit: Some(1), ..Default::default() };
    let late = alice.run_job_on_station(sleeper.mission_id, local_station(), one_minute).await.unwrap();

    let oom = until_ended(alice, oom.job_id).await;
    assert_eq!((oom.status, oom.reason.as_deref()), (JobStatus::Failed, Some("out of memory")), "{oom:?}");
    let late = until_ended(alice, late.job_id).await;
    assert_eq!((late.status, late.reason.as_deref()), (JobStatus::Failed, Some("time limit")), "{late:?}");
    let results = alice.list_job_results(late.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "part.txt"), "{results:?}");
}

#[tokio::test]
async fn an_agent_killed_mid_job_finds_its_slurm_job_again_when_it_restarts() {
    let Some(conf) = slurm_conf("an_agent_killed_mid_job_finds_its_slurm_job_again_when_it_restarts") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let mut agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    let script = "echo before\nwhile [ ! -e go ]; do sleep 0.1; done\nrm go\necho after\necho r > out.txt\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let small = JobResources { memory_amount: Some(64), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), small).await.unwrap();
    until_running(alice, job.job_id).await;
    agent.child.kill().await.unwrap();
    // While the agent is away the job finishes in Slurm; the agent comes back within the lease.
    released(&agent.work_dir(job.job_id).join("go"));
    agent.spawn();
    agent.until_online(&admin).await;
    let done = until_ended(alice, job.job_id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "before\nafter\n");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "out.txt"), "{results:?}");
}

#[tokio::test]
async fn a_gateway_runs_only_as_the_cluster_account_its_landing_zone_was_registered_with() {
    let Some(conf) = slurm_conf("a_gateway_runs_only_as_the_cluster_account_its_landing_zone_was_registered_with")
    else {
        return;
    };
    let (server, admin) = cluster(|_| {}).await;
    let mut agent = SlurmAgent::spawned(&server, &admin, "elsewhere", &conf, "someone-else", &[]).await;
    let status = tokio::time::timeout(Duration::from_secs(60), agent.child.wait()).await.unwrap().unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(agent.dir.path().join("agent.log")).unwrap();
    let expected = format!("registered for cluster account \"someone-else\", but its agent runs as \"{}\"", whoami());
    assert!(log.contains(&expected), "{log}");
    // A landing zone registered without a cluster account takes no gateway either.
    let plain = RegisterLandingZone { name: "plain".into(), cluster_account: None };
    let registered = admin.register_landing_zone(local_station(), &plain).await.unwrap();
    agent.token = registered.token;
    agent.spawn();
    let status = tokio::time::timeout(Duration::from_secs(60), agent.child.wait()).await.unwrap().unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(agent.dir.path().join("agent.log")).unwrap();
    assert!(log.contains("registered without one"), "{log}");
    let bad = RegisterLandingZone { name: "bad".into(), cluster_account: Some("-rf /".into()) };
    let refused = admin.register_landing_zone(local_station(), &bad).await.unwrap_err();
    assert!(refused.to_string().contains("cluster_account"), "{refused}");
}

#[tokio::test]
async fn a_root_gateway_runs_each_users_jobs_as_their_mapped_account_and_refuses_the_unmapped() {
    let Some(conf) = slurm_conf("a_root_gateway_runs_each_users_jobs_as_their_mapped_account_and_refuses_the_unmapped")
    else {
        return;
    };
    if whoami() != "root" {
        mission_testkit::skip_unless_required("SANDBOX", "mapping users to cluster accounts needs root");
        return;
    }
    let (server, admin) = cluster(|_| {}).await;
    let maps = tempfile::tempdir().unwrap();
    let map = maps.path().join("users.map");
    std::fs::write(&map, "# mission user -> cluster account\nalice nobody\n").unwrap();
    let map = map.display().to_string();
    let agent = SlurmAgent::spawned(&server, &admin, "site", &conf, "root", &["--user-map", &map]).await;
    // The mapped account must pass through to its job dirs.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(agent.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    agent.until_online(&admin).await;

    let alice = &server.client;
    let script = "id -u\nid -u > me.txt\n";
    let m = mission(alice, SHELL, &[("run.sh", script)], &[]).await;
    let small = JobResources { memory_amount: Some(64), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), small).await.unwrap();
    let done = until_ended(alice, job.job_id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?}");
    assert_eq!(alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap(), "65534\n");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "me.txt"), "{results:?}");

    // root, a mission user of its own, is not in the map.
    let theirs = mission(&admin, SHELL, &[("run.sh", script)], &[]).await;
    let job = admin.run_job_on_station(theirs.mission_id, local_station(), small).await.unwrap();
    let refused = until_ended(&admin, job.job_id).await;
    assert_eq!(refused.status, JobStatus::Failed);
    assert_eq!(
        refused.reason.as_deref(),
        Some("refused by the landing zone: mission user \"root\" has no cluster account in its user map")
    );
}

/// A batch job (`sbatch` of `mission`, `POST /api/v1/jobs`) under a path the gateway shares goes
/// to the real `sbatch` as its user's mapped account, in its directory, its output in the file
/// it names (the service's patterns filled in, `%N` by Slurm), with its comment and the
/// directives the service passes on; one under a path no landing zone shares is refused.
#[tokio::test]
async fn a_gateway_passes_batch_jobs_to_sbatch_with_their_directives() {
    let Some(conf) = slurm_conf("a_gateway_passes_batch_jobs_to_sbatch_with_their_directives") else { return };
    if whoami() != "root" {
        mission_testkit::skip_unless_required("SANDBOX", "running batch jobs as a mapped account needs root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let (server, admin) = cluster(|_| {}).await;
    let maps = tempfile::tempdir().unwrap();
    let map = maps.path().join("users.map");
    std::fs::write(&map, "alice nobody\n").unwrap();
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let shared_dir = shared.path().display().to_string();
    let flags = ["--user-map", map.to_str().unwrap(), "--shared-path", &shared_dir];
    let agent = SlurmAgent::spawned(&server, &admin, "site", &conf, "root", &flags).await;
    std::fs::set_permissions(agent.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    agent.until_online(&admin).await;

    let alice = &server.client;
    let script = "#!/bin/bash\necho \"$MISSION_JOB_NUMBER $(id -u) $(pwd) $GREETING $1\"\n";
    let batch = |workdir: &str| mission_api::SubmitBatchJob {
        batch: mission_api::JobBatch {
            name: "on-slurm".into(),
            script: script.into(),
            arguments: vec!["arg".into()],
            workdir: workdir.into(),
            stdout: "out-%j-%x-%N.txt".into(),
            environment: [("GREETING".to_owned(), "hello".to_owned())].into(),
            comment: Some("through the gateway".into()),
            directives: vec!["--nice=7".into()],
            ..Default::default()
        },
        run: mission_api::RunJob { station_id: local_station(), memory_amount: Some(64), ..Default::default() },
        array: None,
        hold: false,
    };
    let job = alice.submit_batch_job(&batch(&shared_dir)).await.unwrap();
    let done = until_ended(alice, job.job_id).await;
    assert_eq!(done.status, JobStatus::Completed, "{done:?} {}", agent.log());
    let node = scontrol(&conf, &slurm_id(&done)).await;
    let words: Vec<&str> = node.split_whitespace().collect();
    let value =
        |key: &str| words.iter().find_map(|w| w.strip_prefix(&format!("{key}="))).unwrap_or_default().to_owned();
    assert_eq!(value("Nice"), "7", "{node}");
    assert_eq!(value("WorkDir"), shared_dir, "{node}");
    assert!(node.contains("Comment=through the gateway"), "{node}");
    // %N is Slurm's: the node's host name.
    let prefix = format!("out-{}-on-slurm-", done.number);
    let files: Vec<String> = std::fs::read_dir(shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let out = files.iter().find(|f| f.starts_with(&prefix)).unwrap_or_else(|| panic!("{files:?}\n{node}"));
    let host = out.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix(".txt")).unwrap();
    assert!(!host.is_empty() && !host.contains('%'), "{out}");
    let written = std::fs::read_to_string(shared.path().join(out)).unwrap();
    assert_eq!(written, format!("{} 65534 {shared_dir} hello arg\n", done.number));

    // Nothing shares /nowhere: refused at submission, not queued forever.
    let refused = alice.submit_batch_job(&batch("/nowhere")).await.unwrap_err();
    assert!(refused.to_string().contains("batch.workdir"), "{refused}");

    // `sbatch -N 2` through the front door: the real Slurm gets the job's two nodes (the test
    // cluster has one, so it waits there, as Slurm says).
    let mut two = batch(&shared_dir);
    two.run.nodes = Some(2);
    two.run.launch = Some(mission_api::Launch::First);
    let job = alice.submit_batch_job(&two).await.unwrap();
    let (slurm_id, why) = waiting_in_slurm(alice, &conf, job.job_id).await;
    assert!(why.contains(": Partition"), "the partition is too small: {why}");
    assert!(scontrol(&conf, &slurm_id).await.contains(" NumNodes=2"), "{}", scontrol(&conf, &slurm_id).await);
    alice.stop_job(job.job_id).await.unwrap();
    assert_eq!(until_ended(alice, job.job_id).await.status, JobStatus::Stopped);
}

/// Waits until a job waits in Slurm's queue; its Slurm id (found by the name the gateway gave
/// it) and the pending reason that says why.
async fn waiting_in_slurm(client: &Client, conf: &str, job_id: Uuid) -> (String, String) {
    let reason =
        || async { client.get_job(job_id).await.unwrap().pending_reason.map(|p| p.detail).unwrap_or_default() };
    wait_until("the job waits in Slurm's queue", || async { reason().await.starts_with("waiting in Slurm's queue: ") })
        .await;
    let why = reason().await;
    let name = format!("mission-{job_id}");
    let out = Command::new("squeue").args(["-h", "-o", "%i", "-n", &name]).env("SLURM_CONF", conf).output().await;
    let slurm_id = String::from_utf8_lossy(&out.unwrap().stdout).trim().to_owned();
    assert!(!slurm_id.is_empty(), "{name} in Slurm's queue");
    (slurm_id, why)
}

/// A gang on a gateway is one Slurm job of its nodes, placed by Slurm: `--nodes=2` with one
/// task on each, its warning signal and requeue Slurm's own. The test cluster has one node, so
/// the job waits in Slurm's queue, saying so, until it is stopped.
#[tokio::test]
async fn a_gang_on_a_gateway_is_one_slurm_job_of_its_nodes() {
    let Some(conf) = slurm_conf("a_gang_on_a_gateway_is_one_slurm_job_of_its_nodes") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo \"rank $MISSION_NODE_RANK of $MISSION_NNODES\"\n")], &[]).await;
    let request = mission_api::RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        memory_amount: Some(100),
        nodes: Some(2),
        signal: Some("B:USR1@60".into()),
        requeue: Some(true),
        ..Default::default()
    };
    let job = alice.run_job(m.mission_id, &request).await.unwrap();
    let (slurm_id, why) = waiting_in_slurm(alice, &conf, job.job_id).await;
    assert!(why.contains(": Partition"), "the partition is too small: {why}");
    let shown = scontrol(&conf, &slurm_id).await;
    for expected in
        [" NumNodes=2", " Requeue=1", "mem=200M,node=2", &format!("WorkDir={}", agent.work_dir(job.job_id).display())]
    {
        assert!(shown.contains(expected), "{expected} not in:\n{shown}");
    }
    let placed = alice.get_job(job.job_id).await.unwrap();
    assert_eq!(placed.gang.map(|gang| gang.lz_ids), Some(vec![agent.lz_id]), "the gateway holds it whole");
    alice.stop_job(job.job_id).await.unwrap();
    assert_eq!(until_ended(alice, job.job_id).await.status, JobStatus::Stopped);
}

#[tokio::test]
async fn pilots_run_many_short_jobs_with_our_dispatch_and_leave_when_idle() {
    let Some(conf) = slurm_conf("pilots_run_many_short_jobs_with_our_dispatch_and_leave_when_idle") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let pilots = [
        "--pilots",
        "--max-pilots",
        "2",
        "--pilot-cpus",
        "1",
        "--pilot-memory",
        "1024",
        "--pilot-idle",
        "3",
        "--pilot-time",
        "10",
    ];
    let mut gateway = SlurmAgent::start_with(&server, &admin, "gateway", &conf, &pilots).await;

    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo \"$JOB_ID\"\n")], &[]).await;
    // Larger than a pilot: refused at submission, as by any landing zone too small for it.
    let too_big = JobResources { cpu_count: Some(2), ..Default::default() };
    let refused = alice.run_job_on_station(m.mission_id, local_station(), too_big).await.unwrap_err();
    assert!(refused.to_string().contains("cpu_count"), "{refused}");
    let small = JobResources { cpu_count: Some(1), memory_amount: Some(64), ..Default::default() };
    let mut jobs = Vec::new();
    for _ in 0..200 {
        jobs.push(alice.run_job_on_station(m.mission_id, local_station(), small).await.unwrap().job_id);
    }
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    let mut pilots = std::collections::HashSet::new();
    for job_id in &jobs {
        let done = until_ended(alice, *job_id).await;
        assert_eq!(done.status, JobStatus::Completed, "{done:?}");
        pilots.insert(done.lz_id.unwrap());
    }
    assert_eq!(alice.job_logs(jobs[199], LogStream::Stdout).await.unwrap(), format!("{}\n", jobs[199]));
    let lzs_after = admin.list_landing_zones(local_station()).await.unwrap();
    for pilot in &pilots {
        let lz = lzs.iter().chain(&lzs_after).find(|lz| lz.lz_id == *pilot);
        assert!(lz.is_none_or(|lz| lz.pilot_of == Some(gateway.lz_id)), "{lz:?} is not the gateway's pilot");
        assert_ne!(*pilot, gateway.lz_id, "the gateway runs no job itself");
    }
    assert!((1..=2).contains(&pilots.len()), "{} pilots", pilots.len());
    // The gateway restarts: it finds its pilots again by their names.
    gateway.restart(&admin).await;
    // Idle, the pilots leave, and the gateway removes their landing zones.
    wait_until("the idle pilots are gone", || async {
        let lzs = admin.list_landing_zones(local_station()).await.unwrap();
        !lzs.iter().any(|lz| lz.pilot_of.is_some())
    })
    .await;
}

#[tokio::test]
async fn a_job_cut_off_by_its_pilots_allocation_goes_back_in_the_queue() {
    let Some(conf) = slurm_conf("a_job_cut_off_by_its_pilots_allocation_goes_back_in_the_queue") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let pilots = ["--pilots", "--max-pilots", "1", "--pilot-memory", "512", "--pilot-time", "1"];
    let _gateway = SlurmAgent::start_with(&server, &admin, "gateway", &conf, &pilots).await;
    let alice = &server.client;
    let m = mission(alice, SHELL, &[("run.sh", "echo started\nexec sleep 600\n")], &[]).await;
    let small = JobResources { cpu_count: Some(1), memory_amount: Some(64), ..Default::default() };
    let job = alice.run_job_on_station(m.mission_id, local_station(), small).await.unwrap();
    let running = until_running(alice, job.job_id).await;
    assert_eq!(running.status, JobStatus::Running, "{running:?}");
    let first_pilot = running.lz_id.unwrap();
    // The pilot's one-minute allocation ends under the job: not the job's fault, so it queues
    // again (and a new pilot takes it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    let requeued = loop {
        let job = alice.get_job(job.job_id).await.unwrap();
        let cut = "its pilot's allocation ended before the job did";
        if job.history.iter().any(|t| t.status == JobStatus::Queued && t.detail.as_deref() == Some(cut)) {
            break job;
        }
        assert!(!job.status.is_final(), "{job:?}");
        assert!(tokio::time::Instant::now() < deadline, "the job was not put back in the queue: {job:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    assert!(!lzs.iter().any(|lz| lz.lz_id == first_pilot), "the ended pilot is removed");
    alice.stop_job(requeued.job_id).await.unwrap();
    let stopped = until_ended(alice, requeued.job_id).await;
    assert_eq!(stopped.status, JobStatus::Stopped, "{stopped:?}");
}

/// A gateway told to run images with Podman runs a job's command in its image on the node: the
/// archive staged once on the shared filesystem, the job's work dir mounted, its results
/// returned as for any Slurm job.
#[tokio::test]
async fn a_slurm_job_runs_in_its_image_with_podman_on_the_node() {
    let Some(conf) = slurm_conf("a_slurm_job_runs_in_its_image_with_podman_on_the_node") else { return };
    let Some(archive) = super::containers::test_image() else { return };
    let (server, admin) = cluster(|_| {}).await;
    let engine = ["--container-engine", "podman"];
    let agent = SlurmAgent::start_with(&server, &admin, "podman-gateway", &conf, &engine).await;
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    assert!(lzs.iter().any(|lz| lz.lz_id == agent.lz_id && lz.images), "{lzs:?}");
    let alice = &server.client;
    let request = mission_client::ImportImage { name: "debian".into(), ..Default::default() };
    alice.import_image(&archive, &request, None).await.unwrap();
    let script = "cat /etc/debian_version\necho \"in $PWD\"\necho made > out.txt\n";
    let m = super::containers::mission_in(alice, "debian", script).await;
    let job = alice.run_job_on_station(m, local_station(), super::containers::memory(512)).await.unwrap();
    let done = alice.wait_for_job(job.job_id).await.unwrap();
    let stderr = alice.job_logs(job.job_id, LogStream::Stderr).await.unwrap_or_default();
    assert_eq!(done.status, JobStatus::Completed, "{done:?}\nstderr: {stderr}\n{}", agent.log());
    let stdout = alice.job_logs(job.job_id, LogStream::Stdout).await.unwrap();
    assert!(stdout.starts_with("12."), "Debian 12's version file: {stdout}");
    assert!(stdout.contains(&format!("in {}", agent.work_dir(job.job_id).display())), "{stdout}");
    let results = alice.list_job_results(job.job_id).await.unwrap();
    assert!(results.iter().any(|f| f.relative_path() == "out.txt"), "{results:?}");
    let staged = agent.work_root().join("images");
    let archives: Vec<_> = std::fs::read_dir(&staged).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(archives.len(), 1, "the archive is staged once: {archives:?}");
}

/// A session and shells in a Slurm job: the app on the node is reached through `srun` into the
/// job's allocation and `mission lz-relay` there (HTTP and a WebSocket), and a shell runs there
/// as a job step, on pipes or on a terminal.
#[tokio::test]
async fn a_session_and_a_shell_reach_into_a_running_slurm_job() {
    let Some(conf) = slurm_conf("a_session_and_a_shell_reach_into_a_running_slurm_job") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let mut agent = SlurmAgent::start(&server, &admin, "cluster", &conf).await;
    let alice = &server.client;
    let job = super::sessions::start_web_session(alice).await;
    let running = alice.get_job(job.job_id).await.unwrap();
    let url = job.session.clone().and_then(|s| s.url).unwrap();

    let token = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let page = reqwest::Client::new().get(format!("{url}hello")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    assert!(text.contains("path=/hello") && text.contains("token=ok"), "{text}");
    let address = server.url.trim_start_matches("http://");
    let path = format!("/sessions/{}/echo", job.job_id);
    let mut socket = mission_testkit::WebSocket::open(address, &path, &token).await.unwrap();
    assert_eq!(socket.echo(b"through srun").await, b"through srun");

    // Shells run in the job's allocation, in its work dir.
    // (`srun` says on stderr how a task that failed ended: only stdout is looked at.)
    let run = |command: &'static str, tty: bool| super::shell::run_in(alice, job.job_id, command, tty);
    let (code, printed) = run("echo $SLURM_JOB_ID; pwd; exit 4", false).await;
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(code, Some(4), "{printed}");
    assert_eq!(lines.first().copied(), Some(slurm_id(&running).as_str()), "{printed}");
    assert!(lines.get(1).is_some_and(|dir| dir.ends_with("/work")), "{printed}");
    let (code, printed) = run("tty", true).await;
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.starts_with("/dev/pts/"), "{printed}");

    // The gateway's agent is killed and starts again: it takes the session back from its record.
    agent.restart(&admin).await;
    wait_until("the session answers after the agent's restart", || async {
        let page = reqwest::Client::new().get(format!("{url}hello")).bearer_auth(&token).send().await.unwrap();
        page.status() == 200
    })
    .await;
    assert_eq!(run("echo again", false).await, (Some(0), "again\n".to_owned()));

    alice.stop_job(job.job_id).await.unwrap();
    until_ended(alice, job.job_id).await;
}

/// A session on a gateway's pilot: the pilot, a landing zone inside a Slurm allocation, runs it
/// as a process landing zone does and opens the tunnel to it from the node; a shell opens in it.
#[tokio::test]
async fn a_session_runs_on_a_pilot() {
    use mission_client::{RunJob, SessionKind, SessionRequest};
    let Some(conf) = slurm_conf("a_session_runs_on_a_pilot") else { return };
    let (server, admin) = cluster(|_| {}).await;
    let pilots = ["--pilots", "--max-pilots", "1", "--pilot-cpus", "1", "--pilot-memory", "1024", "--pilot-time", "10"];
    let gateway = SlurmAgent::start_with(&server, &admin, "gateway", &conf, &pilots).await;
    let alice = &server.client;
    let files = [("run.sh", "exec python3 app.py\n"), ("app.py", mission_testkit::SESSION_APP)];
    let app = mission(alice, SHELL, &files, &[]).await;
    let request = RunJob {
        station_id: local_station(),
        cpu_count: Some(1),
        memory_amount: Some(256),
        session: Some(SessionRequest { kind: SessionKind::Web, idle_timeout: None, share_with_managers: false }),
        ..Default::default()
    };
    let job = alice.run_job(app.mission_id, &request).await.unwrap();
    wait_until("the session on a pilot answers", || async {
        let now = alice.get_job(job.job_id).await.unwrap();
        assert!(!now.status.is_final(), "{now:?}");
        now.session.is_some_and(|s| s.url.is_some())
    })
    .await;
    let running = alice.get_job(job.job_id).await.unwrap();
    let url = running.session.as_ref().and_then(|s| s.url.clone());
    let lzs = admin.list_landing_zones(local_station()).await.unwrap();
    let lz = lzs.iter().find(|lz| Some(lz.lz_id) == running.lz_id).unwrap();
    assert_eq!(lz.pilot_of, Some(gateway.lz_id), "it runs on the gateway's pilot");

    let token = mission_testkit::device_sign_in(&server.url, "alice", mission_testkit::PASSWORD).await.0.access_token;
    let page = reqwest::Client::new().get(format!("{}hello", url.unwrap())).bearer_auth(&token).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("token=ok"));
    let (code, printed) = super::shell::run_in(alice, job.job_id, "echo \"$JOB_ID\"", false).await;
    assert_eq!((code, printed), (Some(0), format!("{}\n", job.job_id)), "the shell has the job's environment");
    alice.stop_job(job.job_id).await.unwrap();
    until_ended(alice, job.job_id).await;
}
