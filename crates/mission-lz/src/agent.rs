//! The agent's connection to the server, whatever runs its jobs: connect with a hello, read
//! orders, heartbeat, report, and follow each job through its lifecycle (`lifecycle`) on the
//! runner (`runner::Runner`).
//!
//! Jobs outlive connections: when the server goes away (a restart), the agent keeps its jobs
//! running, reconnects with backoff, names them in its next hello, and delivers the reports and
//! output it could not send meanwhile (reports wait in order; output waits in the job's pipes or
//! files). A runner whose jobs outlive the agent itself (Slurm) resumes them when it starts.
//!
//! Leaving (`Agent::leave`) drains: the jobs running then are killed (except where they outlive
//! the agent) and their tasks settle (cgroups and work dirs handed back), and the reports queued
//! before are delivered, each within a bound. The kills are not reported as stops: the next
//! agent's hello does not name those jobs, so the server counts them lost (which a retry policy
//! may retry), as it would after a crash.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use mission_api::lz::{Assignment, Hello, InputFile, Order, Report};
use mission_api::{JobStatus, JobUsage};
use tokio::sync::{mpsc, watch};
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::cache::{InputCache, Inputs, Lookup};
use crate::client::{Heartbeat, LzClient, SessionEnd, Timings};
use crate::detect::Overrides;
use crate::lifecycle;
use crate::podman::ContainerConfig;
use crate::runner::process::ProcessRunner;
use crate::runner::slurm::{SlurmConfig, SlurmRunner};
use crate::runner::{JobError, Outcome, Runner, StopSwitch, stop_ordered};
use crate::sandbox::{SandboxConfig, SandboxError};

/// How the agent is run.
#[derive(Clone)]
pub struct AgentConfig {
    /// Base URLs of the server: one, or several replicas of one service, tried in turn when a
    /// connection breaks.
    pub servers: Vec<String>,
    /// The landing zone's token.
    pub token: String,
    /// Where the input cache (`cache/`) lives; no job ever sees it.
    pub data_dir: PathBuf,
    /// Overrides of detected resources.
    pub overrides: Overrides,
    /// Run jobs without cgroup limits even where the host has cgroups.
    pub no_limits: bool,
    /// Who jobs run as and what they may see. Its `private_dirs` need not name `data_dir`,
    /// which is always private; an empty `work_root` means the default, [`default_work_root`].
    pub sandbox: SandboxConfig,
    /// What runs the jobs.
    pub runner: RunnerKind,
    /// How jobs run in container images (process landing zones).
    pub containers: ContainerConfig,
    /// Stop when no job has run for this long (a pilot inside a batch job leaves so).
    pub idle_exit: Option<std::time::Duration>,
    /// For the landing zone embedded in a server: the in-process tunnel its sessions are
    /// reached through (none: only tunnels the agent opens out).
    pub local_tunnel: Option<mission_tunnel::LocalTunnel>,
    /// The directories this host shares with the hosts users submit batch jobs from (absolute;
    /// `/` for the landing zone embedded in a server, which shares its host's): see
    /// [`mission_api::batch`].
    pub shared_paths: Vec<String>,
}

/// What runs a landing zone's jobs.
#[derive(Debug, Clone)]
pub enum RunnerKind {
    /// Child processes of the agent on its own host, under cgroup limits in a sandbox.
    Process,
    /// Jobs of a Slurm cluster, submitted from its login node.
    Slurm(Box<SlurmConfig>),
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("servers", &self.servers)
            .field("token", &"[redacted]")
            .field("data_dir", &self.data_dir)
            .field("overrides", &self.overrides)
            .field("no_limits", &self.no_limits)
            .field("sandbox", &self.sandbox)
            .field("runner", &self.runner)
            .field("containers", &self.containers)
            .field("idle_exit", &self.idle_exit)
            .field("local_tunnel", &self.local_tunnel)
            .finish()
    }
}

/// Where the work dirs of the agent whose data dir is `data_dir` go by default:
/// `/var/tmp/mission-lz-{uid}/{hash of the data dir}`, outside any data dir, and the same for
/// every start of that agent (so a restarted agent finds and removes what it left).
pub fn default_work_root(data_dir: &std::path::Path) -> PathBuf {
    let base = if std::path::Path::new("/var/tmp").is_dir() { PathBuf::from("/var/tmp") } else { std::env::temp_dir() };
    let absolute = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let digest = ring::digest::digest(&ring::digest::SHA256, absolute.as_os_str().as_encoded_bytes());
    let name: String = digest.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    base.join(format!("mission-lz-{}", rustix::process::geteuid().as_raw())).join(name)
}

/// Makes `path` (and missing parents) a directory with `mode`, owned by the agent's user, and
/// sets that mode on it if it existed already; a path that is a link or another user's is
/// refused.
pub(crate) fn private_dir(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(path)?;
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(std::io::Error::other("not a directory of the agent's own user"));
    }
    if meta.permissions().mode() & 0o7777 != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The server refused the agent: it does not know the token, or the agent is not what its
    /// landing zone was registered as.
    #[error("the server refused this landing zone's agent: {0}")]
    TokenRefused(String),
    /// The data dir or the work root cannot be used.
    #[error("{0}: {1}")]
    DataDir(PathBuf, std::io::Error),
    /// Jobs cannot be confined as configured.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// The batch system cannot be used.
    #[error("{0}")]
    BatchSystem(String),
}

/// What the agent's tasks share, whatever runs the jobs.
pub(crate) struct Agent {
    /// The way to the server.
    pub client: LzClient,
    /// Inputs, by content.
    pub cache: InputCache,
    /// The jobs this agent runs.
    pub jobs: Mutex<HashMap<Uuid, RunningJob>>,
    /// The sessions among them, and the tunnels they are reached through.
    pub sessions: crate::sessions::Sessions,
    /// The running jobs a shell can be opened in.
    pub shells: crate::shell::Shells,
    /// Jobs that ended here whose final report the server has not taken yet. A hello names
    /// them as running: a server that came up meanwhile (restarted, or a replica that took the
    /// lead) would otherwise count them lost, since it takes no report before the hello.
    unreported_ends: Mutex<HashSet<Uuid>>,
    reports: mpsc::UnboundedSender<Report>,
    /// The jobs' tasks, which leaving waits for.
    tasks: TaskTracker,
    /// The jobs that ran when the agent began to leave: their stops are not reported.
    left_behind: Mutex<HashSet<Uuid>>,
}

/// How long leaving waits for the killed jobs' tasks to settle.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long leaving waits for the server to take the reports queued before.
const DELIVERY_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A job the agent runs.
pub(crate) struct RunningJob {
    /// Its stop switch: the grace period it has after `SIGTERM`, once stopped.
    pub stop: watch::Sender<Option<std::time::Duration>>,
    /// Which of its attempts this is; its reports say so.
    pub attempt: u32,
}

impl Agent {
    /// The attempt of the job that the agent runs (1 where it runs none: an old report).
    fn attempt_of(&self, job_id: Uuid) -> u32 {
        self.jobs.lock().expect("not poisoned").get(&job_id).map_or(1, |job| job.attempt)
    }

    /// A report of the move of a job this agent runs, to `status` at `at`.
    fn report_of(&self, job_id: Uuid, status: JobStatus, at: chrono::DateTime<chrono::Utc>) -> Report {
        Report { attempt: Some(self.attempt_of(job_id)), ..Report::new(job_id, status, at) }
    }

    /// Queues a report of a job's move; it is delivered in order, retried until the server
    /// takes it.
    pub fn report(
        &self,
        job_id: Uuid,
        status: JobStatus,
        exit_code: Option<i32>,
        reason: Option<String>,
        limits: Option<String>,
    ) {
        let report = Report { exit_code, reason, limits, ..self.report_of(job_id, status, chrono::Utc::now()) };
        self.queue(report);
    }

    /// Queues the report of a job's end: its final status, exit code and reason, and what it
    /// used where that was measured.
    pub fn report_end(
        &self,
        job_id: Uuid,
        (status, exit_code, reason): Outcome,
        usage: Option<JobUsage>,
        task_log: Option<mission_api::tes::TesTaskLog>,
    ) {
        self.sessions.forget(job_id);
        let task_log = task_log.map(Box::new);
        let report =
            Report { exit_code, reason, usage, task_log, ..self.report_of(job_id, status, chrono::Utc::now()) };
        self.queue(report);
    }

    /// Queues the report that a job's program started at `at` (seen after the fact, as in a
    /// batch system), with how its limits are enforced.
    pub fn report_started(&self, job_id: Uuid, at: chrono::DateTime<chrono::Utc>, limits: String) {
        let report = Report { limits: Some(limits), ..self.report_of(job_id, JobStatus::Running, at) };
        self.queue(report);
    }

    /// Queues `report` for [`deliver_reports`], unless it is the stop of a job the agent killed
    /// as it left.
    fn queue(&self, report: Report) {
        if report.status == JobStatus::Stopped
            && self.left_behind.lock().expect("not poisoned").contains(&report.job_id)
        {
            return;
        }
        if report.status.is_final() {
            self.unreported_ends.lock().expect("not poisoned").insert(report.job_id);
        }
        let _ = self.reports.send(report);
    }

    /// The jobs to name in a hello: those running here, and those whose end is not reported yet.
    fn running_or_unreported(&self) -> Vec<Uuid> {
        let mut ids: HashSet<Uuid> = self.jobs.lock().expect("not poisoned").keys().copied().collect();
        ids.extend(self.unreported_ends.lock().expect("not poisoned").iter());
        ids.into_iter().collect()
    }

    /// Sets the stop switch of a job this agent runs, giving it `grace` after `SIGTERM`; a
    /// second stop may only shorten the grace (a user's stop of a job being reclaimed kills it).
    pub(crate) fn stop_job(&self, job_id: Uuid, grace: std::time::Duration) {
        if let Some(job) = self.jobs.lock().expect("not poisoned").get(&job_id) {
            job.stop.send_if_modified(|stop| {
                let shorter = stop.is_none_or(|given| grace < given);
                if shorter {
                    *stop = Some(grace);
                }
                shorter
            });
        }
    }

    /// Runs `job` (attempt `attempt` of the given id) with a stop switch, and forgets the
    /// switch when it ends, unless another run of the job (a later attempt, or the same one
    /// again after its room was reclaimed) has started meanwhile.
    fn spawn_job<F: Future<Output = ()> + Send + 'static>(
        self: &Arc<Self>,
        job_id: Uuid,
        attempt: u32,
        job: impl FnOnce(StopSwitch) -> F,
    ) {
        let (stop, stopped) = watch::channel(None);
        let this_run = stop.clone();
        self.jobs.lock().expect("not poisoned").insert(job_id, RunningJob { stop, attempt });
        let (agent, running) = (self.clone(), job(stopped));
        self.tasks.spawn(async move {
            running.await;
            let mut jobs = agent.jobs.lock().expect("not poisoned");
            if jobs.get(&job_id).is_some_and(|job| job.stop.same_channel(&this_run)) {
                jobs.remove(&job_id);
            }
        });
    }

    /// Reports the job `staging` and brings its inputs into the content cache: each missing one
    /// downloaded once and checked, unless a stop comes first. The one staging loop of every
    /// runner; a failure is the job's reason.
    pub async fn stage_inputs(&self, job: &Assignment, stop: &mut StopSwitch) -> Result<Inputs, JobError> {
        self.report(job.job_id, JobStatus::Staging, None, None, None);
        if let Some(task) = &job.task {
            return tokio::select! {
                staged = self.cache.stage_task(&self.client, job.job_id, task) => {
                    staged.map(Inputs::Cached).map_err(|e| JobError::Staging(format!("an input could not be fetched: {e}")))
                }
                _ = stop_ordered(stop) => Ok(Inputs::Stopped),
            };
        }
        let mut downloaded = false;
        loop {
            match self.cache.lookup(&job.files) {
                Ok(inputs) => return Ok(Inputs::Cached(inputs)),
                Err(Lookup::Invalid(why)) => return Err(JobError::Staging(why)),
                Err(Lookup::Missing(_)) if downloaded => {
                    return Err(JobError::Staging("the input cache changed meanwhile".into()));
                }
                Err(Lookup::Missing(missing)) => {
                    let missing: Vec<&InputFile> = missing.into_iter().map(|i| &job.files[i]).collect();
                    tokio::select! {
                        fetched = self.cache.download(&self.client, job.job_id, &missing) => {
                            fetched.map_err(JobError::Staging)?;
                        }
                        _ = stop_ordered(stop) => return Ok(Inputs::Stopped),
                    }
                    downloaded = true;
                }
            }
        }
    }

    /// Leaves: kills the jobs running now unless they `outlive` the agent (a batch system's),
    /// waits for their tasks to settle, then for the server to take the reports queued (of jobs
    /// that ended before), each for a bounded time.
    async fn leave(&self, outlive: bool) {
        {
            let jobs = self.jobs.lock().expect("not poisoned");
            self.left_behind.lock().expect("not poisoned").extend(jobs.keys().copied());
            if !outlive {
                for job in jobs.values() {
                    let _ = job.stop.send(Some(std::time::Duration::ZERO));
                }
            }
        }
        self.tasks.close();
        if !outlive && tokio::time::timeout(SETTLE_LIMIT, self.tasks.wait()).await.is_err() {
            tracing::warn!("leaving before every killed job settled (waited {SETTLE_LIMIT:?})");
        }
        let delivered = async {
            while !self.unreported_ends.lock().expect("not poisoned").is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(DELIVERY_LIMIT, delivered).await.is_err() {
            tracing::warn!("leaving with job ends the server has not taken (waited {DELIVERY_LIMIT:?})");
        }
    }
}

/// Runs the agent until `shutdown` completes (jobs still running are killed then, except where
/// they run in a batch system; see `Agent::leave`) or the server refuses its token.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    for path in [config.data_dir.clone(), config.data_dir.join("cache")] {
        private_dir(&path, 0o700).map_err(|e| AgentError::DataDir(path.clone(), e))?;
    }
    match &config.runner {
        RunnerKind::Process => serve(&config, ProcessRunner::start(&config).await?, shutdown).await,
        RunnerKind::Slurm(slurm) => serve(&config, SlurmRunner::start(&config, slurm).await?, shutdown).await,
    }
}

async fn serve<R: Runner>(
    config: &AgentConfig,
    runner: Arc<R>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let (reports, queue) = mpsc::unbounded_channel();
    let agent = Arc::new(Agent {
        client: LzClient::new(&config.servers, &config.token, Timings::default())?,
        cache: InputCache::new(config.data_dir.join("cache")),
        jobs: Mutex::new(HashMap::new()),
        sessions: Default::default(),
        shells: Default::default(),
        unreported_ends: Mutex::new(HashSet::new()),
        reports,
        tasks: TaskTracker::new(),
        left_behind: Mutex::new(HashSet::new()),
    });
    for (job_id, attempt) in runner.recovered() {
        let (runner, agent2) = (runner.clone(), agent.clone());
        agent.spawn_job(job_id, attempt, move |stop| lifecycle::resume(runner, agent2, job_id, stop));
    }
    let reporter = tokio::spawn(deliver_reports(agent.clone(), queue));
    if let Some(local) = &config.local_tunnel {
        local.serve(crate::sessions::local_service(agent.clone()));
    }
    runner.attach(&agent);
    let result = tokio::select! {
        result = connect_loop(&agent, &runner) => result,
        () = shutdown => Ok(()),
        () = idle(&agent, config.idle_exit) => {
            tracing::info!("no job ran for {:?}: leaving", config.idle_exit.unwrap_or_default());
            Ok(())
        }
    };

    agent.leave(R::JOBS_OUTLIVE_AGENT).await;
    reporter.abort();
    result
}

/// Resolves once no job has run, and no job's end has waited for the server to take its report,
/// for `limit` (never, without one): an agent that leaves then takes no report with it.
async fn idle(agent: &Agent, limit: Option<std::time::Duration>) {
    let Some(limit) = limit else { return std::future::pending().await };
    let mut idle_since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250).min(limit)).await;
        if !agent.running_or_unreported().is_empty() {
            idle_since = tokio::time::Instant::now();
        } else if idle_since.elapsed() >= limit {
            return;
        }
    }
}

async fn connect_loop<R: Runner>(agent: &Arc<Agent>, runner: &Arc<R>) -> Result<(), AgentError> {
    let mut delays = agent.client.timings().reconnect.delays();
    loop {
        let running = agent.running_or_unreported();
        let offer = runner.offer().await;
        let hello = Hello {
            resources: offer.resources,
            gpus: offer.gpus,
            running,
            max_jobs: offer.max_jobs,
            cluster_account: offer.cluster_account,
            images: offer.images,
            shared_paths: offer.shared_paths,
            disk_mb: offer.disk_mb,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        match session(agent, runner, &hello).await {
            Ok(()) => {
                delays = agent.client.timings().reconnect.delays();
                tokio::time::sleep(agent.client.timings().reconnect.first).await;
            }
            Err(SessionEnd::Refused(why)) => return Err(AgentError::TokenRefused(why)),
            Err(SessionEnd::Broken(why)) => {
                let delay = delays.next().expect("endless");
                let (now, next) = (agent.client.server().to_owned(), agent.client.next_server());
                if now == next {
                    tracing::warn!("connection to the server lost: {why}; reconnecting in {delay:?}");
                } else {
                    tracing::warn!("connection to the server lost: {why}; trying {next} in {delay:?}");
                }
                tokio::time::sleep(delay).await;
            }
        }
    }
}

/// One connection: hello, then orders until the stream ends.
async fn session<R: Runner>(agent: &Arc<Agent>, runner: &Arc<R>, hello: &Hello) -> Result<(), SessionEnd> {
    let (welcome, mut orders) = agent.client.connect(hello).await?;
    tracing::info!(lz = %welcome.name, lz_id = %welcome.lz_id, "connected");
    for job_id in &welcome.drop {
        agent.stop_job(*job_id, std::time::Duration::ZERO);
    }
    let lease = std::time::Duration::from_secs(welcome.lease_seconds.max(3));
    let (forgotten, mut reconnect) = watch::channel(false);
    let heartbeat = tokio::spawn(heartbeats(agent.clone(), lease / 3, forgotten));
    // Orders (or pings) come at least every third of the lease; silence for a whole lease means
    // the connection is dead even if TCP has not noticed.
    let result = loop {
        let next = tokio::select! {
            next = orders.next(lease) => next,
            _ = reconnect.wait_for(|r| *r) => {
                break Err(SessionEnd::Broken("the server no longer knows this connection".into()));
            }
        };
        match next {
            Ok(Some(Order::Run(job))) => {
                let (runner, agent2) = (runner.clone(), agent.clone());
                agent.spawn_job(job.job_id, job.attempt, move |stop| lifecycle::run(runner, agent2, *job, stop));
            }
            Ok(Some(Order::Stop { job_id, grace_seconds })) => {
                agent.stop_job(job_id, std::time::Duration::from_secs(grace_seconds.into()));
            }
            Ok(Some(Order::Tunnel { url })) => crate::sessions::open_tunnel(agent.clone(), url),
            Ok(Some(Order::Ping)) => {}
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    heartbeat.abort();
    result
}

/// Renews the lease every `every`; sets `forgotten` when the server answers that it does not
/// know this connection, so the agent connects again and tells it which jobs it runs.
async fn heartbeats(agent: Arc<Agent>, every: std::time::Duration, forgotten: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(every).await;
        match agent.client.heartbeat().await {
            Ok(Heartbeat::Renewed) => {}
            Ok(Heartbeat::Forgotten) => {
                let _ = forgotten.send(true);
                return;
            }
            Err(e) => tracing::warn!("heartbeat failed: {e}"),
        }
    }
}

/// Sends queued reports in batches, in order, retrying each batch until the server takes it.
async fn deliver_reports(agent: Arc<Agent>, mut queue: mpsc::UnboundedReceiver<Report>) {
    let mut batch = Vec::new();
    let gather = agent.client.timings().report_gather;
    loop {
        if batch.is_empty() {
            match queue.recv().await {
                Some(report) => batch.push(report),
                None => return,
            }
        }
        let deadline = tokio::time::Instant::now() + gather;
        loop {
            while let Ok(report) = queue.try_recv() {
                batch.push(report);
            }
            if batch.iter().any(|r| r.status.is_final()) {
                break;
            }
            match tokio::time::timeout_at(deadline, queue.recv()).await {
                Ok(Some(report)) => batch.push(report),
                Ok(None) | Err(_) => break,
            }
        }
        if let Err(e) = agent.client.delivered(|| agent.client.reports(&batch)).await {
            // The server will never take these (its answer says why): do not block the rest.
            tracing::error!("reports refused: {e}");
        }
        let mut unreported = agent.unreported_ends.lock().expect("not poisoned");
        for report in batch.drain(..).filter(|r| r.status.is_final()) {
            unreported.remove(&report.job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Reads one HTTP request (headers and a `content-length` body), answers 204, and gives back
    /// the request as text.
    async fn take_one_request(connection: &mut tokio::net::TcpStream) -> String {
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = connection.read(&mut buf).await.unwrap();
            assert!(n > 0, "the agent hung up mid-request");
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
            let Some(end) = text.find("\r\n\r\n") else { continue };
            let length = text
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |n| n.trim().parse::<usize>().unwrap());
            if request.len() >= end + 4 + length {
                break;
            }
        }
        connection.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n").await.unwrap();
        String::from_utf8_lossy(&request).into_owned()
    }

    /// A server's listener, and an agent that reports to it (its queue of reports, and its cache
    /// dir, kept while the test runs).
    async fn listener_and_agent()
    -> (tokio::net::TcpListener, Arc<Agent>, mpsc::UnboundedReceiver<Report>, tempfile::TempDir) {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", server.local_addr().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let (reports, queue) = mpsc::unbounded_channel();
        let agent = Arc::new(Agent {
            client: LzClient::new(&[url], "token", Timings::default()).unwrap(),
            cache: InputCache::new(dir.path().to_path_buf()),
            jobs: Mutex::default(),
            sessions: Default::default(),
            shells: Default::default(),
            unreported_ends: Mutex::default(),
            reports,
            tasks: TaskTracker::new(),
            left_behind: Mutex::default(),
        });
        (server, agent, queue, dir)
    }

    /// A job that ended while no server took its report (a restart, a replica taking the lead) is
    /// named in the hello: the server that comes up takes no report before the hello, and would
    /// count a running job the hello does not name as lost. Once the report is taken, it is not.
    #[tokio::test]
    async fn a_hello_names_a_job_until_its_end_is_reported() {
        let (server, agent, queue, _cache) = listener_and_agent().await;
        let (ended, running) = (Uuid::new_v4(), Uuid::new_v4());
        agent.spawn_job(running, 1, |_stop| std::future::pending());
        agent.report_end(ended, (JobStatus::Completed, Some(0), None), None, None);
        let mut named = agent.running_or_unreported();
        named.sort();
        let mut both = vec![ended, running];
        both.sort();
        assert_eq!(named, both, "the ended job's report is not delivered yet");

        let reporter = tokio::spawn(deliver_reports(agent.clone(), queue));
        let (mut connection, _) = server.accept().await.unwrap();
        take_one_request(&mut connection).await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while agent.running_or_unreported() != [running] {
            assert!(tokio::time::Instant::now() < deadline, "{:?}", agent.running_or_unreported());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        reporter.abort();
    }

    /// Leaving kills the jobs running (each task settles: here it reports the stop it sees,
    /// which is not sent), and delivers the end of a job that ended before, with nothing more.
    #[tokio::test]
    async fn leaving_kills_running_jobs_unreported_and_delivers_the_ends_queued_before() {
        let (server, agent, queue, _cache) = listener_and_agent().await;
        let (ended, running) = (Uuid::new_v4(), Uuid::new_v4());
        let settled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (agent2, settled2) = (agent.clone(), settled.clone());
        agent.spawn_job(running, 1, move |mut stop| async move {
            let grace = stop.wait_for(Option::is_some).await.unwrap().expect("stopped");
            assert!(grace.is_zero(), "killed at once");
            agent2.report_end(running, (JobStatus::Stopped, None, Some("stopped".into())), None, None);
            settled2.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        agent.report_end(ended, (JobStatus::Completed, Some(0), None), None, None);
        let reporter = tokio::spawn(deliver_reports(agent.clone(), queue));
        let taken = tokio::spawn(async move {
            let (mut connection, _) = server.accept().await.unwrap();
            let request = take_one_request(&mut connection).await;
            // Nothing else comes: a second request would be a report of the killed job.
            let more = tokio::time::timeout(std::time::Duration::from_millis(500), server.accept()).await;
            (request, more.is_ok())
        });
        tokio::time::timeout(std::time::Duration::from_secs(20), agent.leave(false)).await.expect("leaves in time");
        assert!(settled.load(std::sync::atomic::Ordering::SeqCst), "the killed job's task settled first");
        assert!(agent.unreported_ends.lock().unwrap().is_empty(), "the queued end was taken");
        let (request, more) = taken.await.unwrap();
        assert!(request.contains(&ended.to_string()), "{request}");
        assert!(!request.contains(&running.to_string()), "the kill is not reported as a stop: {request}");
        assert!(!more, "one request: the end queued before");
        reporter.abort();
    }
}
