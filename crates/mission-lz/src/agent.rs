//! The agent's connection to the server: connect with a hello, read orders, heartbeat, report.
//!
//! Jobs outlive connections: when the server goes away (a restart), the agent keeps its jobs
//! running, reconnects with backoff, names them in its next hello, and delivers the reports and
//! output it could not send meanwhile (reports wait in order; output waits in the job's pipes).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::lz::{Gpu, Hello, Order, Report, Welcome};
use mission_api::{JobStatus, Resources};
use reqwest::StatusCode;
use tokio::sync::{mpsc, watch};
use uuid::Uuid;

use crate::cgroups::Cgroups;
use crate::detect::{Overrides, detect};
use crate::runner;
use crate::sandbox::{Launcher, Sandbox, SandboxConfig, SandboxError};
use crate::workdirs::WorkDirs;

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
fn private_dir(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
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
    /// The server does not know the token.
    #[error("the server refused the landing-zone token: {0}")]
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
}

/// What the agent's tasks share.
pub(crate) struct Shared {
    pub http: reqwest::Client,
    /// The server's base URLs; requests go to the one `current` names.
    servers: Vec<String>,
    current: std::sync::atomic::AtomicUsize,
    token: String,
    pub data_dir: PathBuf,
    pub cgroups: Cgroups,
    pub work_dirs: WorkDirs,
    pub sandbox: Sandbox,
    pub launcher: Launcher,
    /// What every job's environment starts from (see [`runner::base_env`]).
    pub job_env: Vec<(&'static str, std::ffi::OsString)>,
    /// Stop switches of the jobs this agent runs.
    pub jobs: Mutex<HashMap<Uuid, watch::Sender<bool>>>,
    reports: mpsc::UnboundedSender<Report>,
}

impl Shared {
    /// A request to `path` under `/api/v1/lz` of the current server, with the token.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let base = &self.servers[self.current.load(std::sync::atomic::Ordering::Relaxed) % self.servers.len()];
        self.http.request(method, format!("{base}{}/lz{path}", mission_api::API_PREFIX)).bearer_auth(&self.token)
    }

    /// Moves on to the next of the server's URLs (after a broken connection); answers it.
    fn next_server(&self) -> &str {
        let next = self.current.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        &self.servers[next % self.servers.len()]
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
        let report = Report { job_id, status, at: chrono::Utc::now(), exit_code, reason, limits };
        let _ = self.reports.send(report);
    }
}

/// Runs the agent until `shutdown` completes (jobs still running are killed then) or the server
/// refuses its token.
pub async fn run(config: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), AgentError> {
    for path in [config.data_dir.clone(), config.data_dir.join("cache")] {
        private_dir(&path, 0o700).map_err(|e| AgentError::DataDir(path.clone(), e))?;
    }
    // Work dirs of agents before version 0.2 lay in the data dir.
    let _ = std::fs::remove_dir_all(config.data_dir.join("jobs"));
    let mut isolation = config.sandbox.clone();
    if isolation.work_root.as_os_str().is_empty() {
        isolation.work_root = default_work_root(&config.data_dir);
    }
    let work_root = isolation.work_root.clone();
    // Job users must pass through the work root (0711: they cannot list it) to their own dirs.
    let root = rustix::process::geteuid().is_root();
    for dir in work_root.ancestors().take(2).collect::<Vec<_>>().into_iter().rev() {
        private_dir(dir, if root { 0o711 } else { 0o700 }).map_err(|e| AgentError::DataDir(dir.to_path_buf(), e))?;
    }
    // Work dirs of a previous run of this agent hold nothing anyone will collect.
    if let Ok(entries) = std::fs::read_dir(&work_root) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    isolation.private_dirs.insert(0, config.data_dir.clone());
    let launcher = Launcher::start().map_err(|e| AgentError::DataDir(work_root.clone(), e))?;
    let (sandbox, launcher) = tokio::task::spawn_blocking(move || {
        let sandbox = Sandbox::detect(&isolation, &launcher)?;
        // Before anything runs: what jobs of agents that died left running goes.
        sandbox.sweep();
        Ok::<_, SandboxError>((sandbox, launcher))
    })
    .await
    .expect("sandbox detection does not panic")?;
    let (resources, gpus) = detect(config.overrides).await;
    let cgroups = if config.no_limits {
        Cgroups::unavailable("switched off on this landing zone (--lz-no-limits)")
    } else {
        tokio::task::spawn_blocking(Cgroups::detect).await.unwrap_or_else(|e| Cgroups::unavailable(e.to_string()))
    };
    tracing::info!(
        cpus = resources.cpu_count,
        memory_mb = resources.memory_amount,
        gpus = resources.gpu_count,
        limits = %cgroups.describe(),
        jobs = %sandbox.describe(),
        work_root = %work_root.display(),
        "landing zone agent starting"
    );
    let http = reqwest::Client::builder().tcp_nodelay(true).connect_timeout(Duration::from_secs(5)).build()?;
    let (reports, queue) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        http,
        servers: config.servers.iter().map(|url| url.trim_end_matches('/').to_owned()).collect(),
        current: std::sync::atomic::AtomicUsize::new(0),
        token: config.token.clone(),
        data_dir: config.data_dir.clone(),
        cgroups,
        work_dirs: WorkDirs::new(work_root),
        sandbox,
        launcher,
        job_env: runner::base_env(),
        jobs: Mutex::new(HashMap::new()),
        reports,
    });
    let reporter = tokio::spawn(deliver_reports(shared.clone(), queue));
    let result = tokio::select! {
        result = connect_loop(&shared, resources, gpus) => result,
        () = shutdown => Ok(()),
    };
    for stop in shared.jobs.lock().expect("not poisoned").values() {
        let _ = stop.send(true);
    }
    reporter.abort();
    result
}

async fn connect_loop(shared: &Arc<Shared>, resources: Resources, gpus: Vec<Gpu>) -> Result<(), AgentError> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let running: Vec<Uuid> = shared.jobs.lock().expect("not poisoned").keys().copied().collect();
        let hello = Hello { resources, gpus: gpus.clone(), running, version: env!("CARGO_PKG_VERSION").to_owned() };
        match session(shared, &hello).await {
            Ok(()) => {
                backoff = Duration::from_millis(100);
                tokio::time::sleep(backoff).await;
            }
            Err(SessionEnd::Refused(why)) => return Err(AgentError::TokenRefused(why)),
            Err(SessionEnd::Broken(why)) => {
                if shared.servers.len() > 1 {
                    let next = shared.next_server();
                    tracing::warn!("connection to the server lost: {why}; trying {next} in {backoff:?}");
                } else {
                    tracing::warn!("connection to the server lost: {why}; reconnecting in {backoff:?}");
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

enum SessionEnd {
    Refused(String),
    Broken(String),
}

/// One connection: hello, then orders until the stream ends.
async fn session(shared: &Arc<Shared>, hello: &Hello) -> Result<(), SessionEnd> {
    let broken = |e: reqwest::Error| SessionEnd::Broken(e.to_string());
    let mut response = shared.request(reqwest::Method::POST, "/connect").json(hello).send().await.map_err(broken)?;
    if response.status() == StatusCode::UNAUTHORIZED {
        return Err(SessionEnd::Refused(response.text().await.unwrap_or_default()));
    }
    if !response.status().is_success() {
        let status = response.status();
        return Err(SessionEnd::Broken(format!("{status}: {}", response.text().await.unwrap_or_default())));
    }
    let mut lines = LineReader::default();
    let first = lines.next(&mut response, None).await?.ok_or_else(|| SessionEnd::Broken("no welcome".into()))?;
    let welcome: Welcome =
        serde_json::from_slice(&first).map_err(|e| SessionEnd::Broken(format!("bad welcome: {e}")))?;
    tracing::info!(lz = %welcome.name, lz_id = %welcome.lz_id, "connected");
    for job_id in &welcome.drop {
        stop_job(shared, *job_id);
    }
    let lease = Duration::from_secs(welcome.lease_seconds.max(3));
    let (forgotten, mut reconnect) = watch::channel(false);
    let heartbeat = tokio::spawn(heartbeats(shared.clone(), lease / 3, forgotten));
    // Orders (or pings) come at least every third of the lease; silence for a whole lease means
    // the connection is dead even if TCP has not noticed.
    let result = loop {
        let next = tokio::select! {
            next = lines.next(&mut response, Some(lease)) => next,
            _ = reconnect.wait_for(|r| *r) => {
                break Err(SessionEnd::Broken("the server no longer knows this connection".into()));
            }
        };
        let line = match next {
            Ok(Some(line)) => line,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        match serde_json::from_slice::<Order>(&line) {
            Ok(Order::Run(assignment)) => {
                let (stop, stopped) = watch::channel(false);
                shared.jobs.lock().expect("not poisoned").insert(assignment.job_id, stop);
                tokio::spawn(runner::run_job(shared.clone(), assignment, stopped));
            }
            Ok(Order::Stop { job_id }) => stop_job(shared, job_id),
            Ok(Order::Ping) => {}
            Err(e) => tracing::warn!("ignoring an order this agent does not understand: {e}"),
        }
    };
    heartbeat.abort();
    result
}

fn stop_job(shared: &Shared, job_id: Uuid) {
    if let Some(stop) = shared.jobs.lock().expect("not poisoned").get(&job_id) {
        let _ = stop.send(true);
    }
}

/// Renews the lease every `every`; sets `forgotten` when the server answers that it does not
/// know this connection (a 409: it restarted, or another replica took over its scheduler), so
/// the agent connects again and tells it which jobs it runs.
async fn heartbeats(shared: Arc<Shared>, every: Duration, forgotten: watch::Sender<bool>) {
    loop {
        tokio::time::sleep(every).await;
        match shared.request(reqwest::Method::POST, "/heartbeat").send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) if r.status() == StatusCode::CONFLICT => {
                let _ = forgotten.send(true);
                return;
            }
            Ok(r) => tracing::warn!("heartbeat answered {}", r.status()),
            Err(e) => tracing::warn!("heartbeat failed: {e}"),
        }
    }
}

/// How long a report that frees nothing (a job staging, running or uploading) may wait for the
/// next one, so that a short job's moves travel together; a job's final report goes at once,
/// since the server needs it to hand the job's resources to the next.
const REPORT_GATHER: Duration = Duration::from_millis(5);

/// Sends queued reports in batches, in order, retrying each batch until the server takes it.
async fn deliver_reports(shared: Arc<Shared>, mut queue: mpsc::UnboundedReceiver<Report>) {
    let mut batch = Vec::new();
    let mut backoff = Duration::from_millis(50);
    loop {
        if batch.is_empty() {
            match queue.recv().await {
                Some(report) => batch.push(report),
                None => return,
            }
        }
        let deadline = tokio::time::Instant::now() + REPORT_GATHER;
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
        match shared.request(reqwest::Method::POST, "/reports").json(&batch).send().await {
            Ok(r) if r.status().is_success() => {
                batch.clear();
                backoff = Duration::from_millis(50);
                continue;
            }
            Ok(r) if r.status().is_client_error() && r.status() != StatusCode::CONFLICT => {
                // The server will never take these (its answer says why): do not block the rest.
                tracing::error!("reports refused ({}): {}", r.status(), r.text().await.unwrap_or_default());
                batch.clear();
                continue;
            }
            Ok(r) => tracing::warn!("reports not taken yet ({}); retrying", r.status()),
            Err(e) => tracing::warn!("reports not delivered yet ({e}); retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Splits a streamed body into lines.
#[derive(Default)]
struct LineReader {
    buf: Vec<u8>,
}

impl LineReader {
    async fn next(
        &mut self,
        response: &mut reqwest::Response,
        silence: Option<Duration>,
    ) -> Result<Option<Vec<u8>>, SessionEnd> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(line[..line.len() - 1].to_vec()));
            }
            let chunk = match silence {
                Some(limit) => tokio::time::timeout(limit, response.chunk())
                    .await
                    .map_err(|_| SessionEnd::Broken(format!("no word from the server for {limit:?}")))?,
                None => response.chunk().await,
            };
            match chunk.map_err(|e| SessionEnd::Broken(e.to_string()))? {
                Some(bytes) => self.buf.extend_from_slice(&bytes),
                None => return Ok(None),
            }
        }
    }
}
