//! What runs a landing zone's jobs: the seam between the agent (which owns every job's
//! lifecycle, the same for every runner: see `lifecycle`) and the place jobs run. A runner only
//! starts a job whose inputs the agent staged, and hands back a [`JobHandle`] to wait for it,
//! signal it, and collect how it ended, its results and what it used. Two runners implement it:
//! - [`process`]: child processes of the agent on its own host, under cgroup limits in a sandbox;
//! - [`slurm`]: jobs of a Slurm cluster, submitted from its login node.

mod batch;
pub mod process;
pub mod slurm;
pub(crate) mod task;

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use mission_api::lz::{Assignment, Gpu, LogOffsets};
use mission_api::{JobStatus, JobUsage, Resources};
use tokio::sync::watch;
use uuid::Uuid;

use crate::client::LzClient;
use crate::jobs::JobContext;

/// What a landing zone offers, as its hello says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Offer {
    /// Resources: those of the host, or a cluster's largest node.
    pub resources: Resources,
    /// The GPUs behind `resources.gpu_count`, where the agent hands them out itself.
    pub gpus: Vec<Gpu>,
    /// How many jobs a batch-system gateway takes at once (see [`mission_api::lz::Hello`]).
    pub max_jobs: Option<u32>,
    /// The cluster account a batch-system gateway submits its jobs as.
    pub cluster_account: Option<String>,
    /// Whether it runs jobs in container images.
    pub images: bool,
    /// The directories it runs batch jobs in (see [`mission_api::lz::Hello::shared_paths`]).
    pub shared_paths: Vec<String>,
    /// Megabytes free for jobs' files (see [`mission_api::lz::Hello::disk_mb`]).
    pub disk_mb: Option<u64>,
}

/// Why a job could not run to its end on this landing zone. Its text is the job's `reason`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    /// The landing zone refuses the job (the text says why and what its operator can do).
    #[error("{0}")]
    Refused(String),
    /// Its inputs could not be staged: downloaded, checked, or copied into its work dir.
    #[error("staging the mission's files failed: {0}")]
    Staging(String),
    /// Its container image could not be downloaded or loaded.
    #[error("the job's image could not be loaded on this landing zone: {0}")]
    Image(String),
    /// Its program could not be started (the text names it), or it has none.
    #[error("{0}")]
    Launch(String),
    /// Waiting for its program failed.
    #[error("waiting for the program: {0}")]
    Wait(std::io::Error),
    /// A result could not be uploaded (the text names it).
    #[error("uploading results failed: {0}")]
    Upload(String),
    /// The batch system failed or lost it (the text says how).
    #[error("{0}")]
    BatchSystem(String),
    /// A step of the agent's own failed (a blocking task that panicked).
    #[error("{0}")]
    Agent(String),
}

impl From<tokio::task::JoinError> for JobError {
    fn from(e: tokio::task::JoinError) -> Self {
        Self::Agent(e.to_string())
    }
}

/// A job's stop switch as its runner sees it: `None` until a stop is ordered, then how long the
/// job may take to end after `SIGTERM` before `SIGKILL` (zero: kill at once). A later stop may
/// shorten it.
pub(crate) type StopSwitch = watch::Receiver<Option<std::time::Duration>>;

/// A job's final status, exit code and reason.
pub(crate) type Outcome = (JobStatus, Option<i32>, Option<String>);

/// Runs the jobs of one landing zone.
pub(crate) trait Runner: Send + Sync + 'static {
    /// What it hands back for a job it started.
    type Job: JobHandle;

    /// What the landing zone offers now (asked at every connection: a cluster's nodes change).
    fn offer(&self) -> impl Future<Output = Offer> + Send;

    /// Why this landing zone refuses `job` (the job's reason), asked before its inputs are staged.
    fn refusal(&self, job: &Assignment) -> Option<String> {
        let _ = job;
        None
    }

    /// Starts `job`, whose inputs the agent staged in its content cache (`inputs`: each file's
    /// cached copy and its path in the work dir); tells `events` when it runs. On failure,
    /// nothing of the job is left.
    fn start(
        self: &Arc<Self>,
        job: &Assignment,
        inputs: Vec<(PathBuf, PathBuf)>,
        events: JobEvents,
    ) -> impl Future<Output = Result<Self::Job, JobError>> + Send;

    /// Jobs a previous run of the agent left running that this one can follow to their ends,
    /// with the attempt of each.
    fn recovered(&self) -> Vec<(Uuid, u32)> {
        Vec::new()
    }

    /// A handle on a job of [`Runner::recovered`] (never called where nothing is recovered).
    fn recover(
        self: &Arc<Self>,
        job_id: Uuid,
        events: JobEvents,
    ) -> impl Future<Output = Result<Self::Job, JobError>> + Send {
        let _ = (job_id, events);
        std::future::ready(Err(JobError::Agent("this landing zone recovers no job".into())))
    }

    /// The agent is up (its client made, its jobs resumed): start what works beside the jobs.
    fn attach(self: &Arc<Self>, client: &Arc<LzClient>) {
        let _ = client;
    }

    /// Whether its jobs run on when the agent stops (a batch system's, which a restarted agent
    /// resumes); else the agent kills them as it leaves.
    const JOBS_OUTLIVE_AGENT: bool = false;
}

/// A job a runner started, from its start to the hand-back of what it held. The agent calls
/// [`JobHandle::wait`] (and [`JobHandle::signal`] meanwhile), then [`JobHandle::finish`],
/// [`JobHandle::usage`] and [`JobHandle::release`], each once, in that order.
pub(crate) trait JobHandle: Send + 'static {
    /// Where its output comes from; asked once, when it runs (or, if it never ran, when it ended).
    fn output(&mut self) -> JobOutput;

    /// Resolves once the job has ended. Cancel-safe: the agent drops it to signal the job, then
    /// waits again.
    fn wait(&mut self) -> impl Future<Output = ()> + Send;

    /// Asks the job to end (`Signal::Term`: `SIGTERM`, or a batch system's cancel), or ends it
    /// at once (`Signal::Kill`).
    fn signal(&mut self, signal: Signal) -> impl Future<Output = ()> + Send;

    /// Once it ended: ends what it left running and its output, and answers how it ended
    /// (`stopped`: whether a stop signalled it) and its results.
    fn finish(&mut self, stopped: bool) -> impl Future<Output = Result<Finished, JobError>> + Send;

    /// What it used, where that was measured.
    fn usage(&mut self) -> impl Future<Output = Option<JobUsage>> + Send;

    /// Hands back what the job held (its work dir, its user, its record).
    fn release(self) -> impl Future<Output = ()> + Send;

    /// Whether [`JobHandle::release`] must come before the report of the job's end: where a
    /// retry of the job, which the report may bring at once, would reuse what it holds.
    const RELEASE_BEFORE_REPORT: bool = false;
}

/// How a job ended, and the new or changed files of its work dir (each path, and its path
/// relative to the work dir); for a TES task, what its run left instead.
pub(crate) struct Finished {
    pub outcome: Outcome,
    pub results: Vec<(PathBuf, String)>,
    pub task: Option<TaskFinished>,
}

/// What a TES task's run left: each executor's log, as far as they ran, and the files its
/// outputs upload (or which output is not there).
pub(crate) struct TaskFinished {
    pub logs: Vec<mission_api::tes::TesExecutorLog>,
    pub outputs: Result<Vec<task::OutputFile>, String>,
}

/// How the agent asks a job to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// End in its own time (the grace a stop order gives).
    Term,
    /// End now.
    Kill,
}

/// Where a job's stdout and stderr come from, and where in its logs they start.
pub(crate) struct JobOutput {
    pub offsets: LogOffsets,
    pub source: OutputSource,
}

/// Where a job's output streams come from.
pub(crate) enum OutputSource {
    /// The read ends of its stdout and stderr pipes.
    Pipes([Option<OwnedFd>; 2]),
    /// Files it writes its stdout and stderr to, tailed until `ended` is set.
    Files { paths: [PathBuf; 2], ended: watch::Receiver<bool> },
}

/// What a runner tells the agent about a job it started, while it runs.
pub(crate) struct JobEvents {
    ctx: JobContext,
    job_id: Uuid,
    running: watch::Sender<bool>,
    session_env: Vec<(&'static str, String)>,
}

impl JobEvents {
    /// Events of `job_id`, and the switch that tells when it runs; a session's program gets
    /// `session_env` ([`crate::sessions::Sessions::prepare`]).
    pub fn new(
        ctx: JobContext,
        job_id: Uuid,
        session_env: Vec<(&'static str, String)>,
    ) -> (Self, watch::Receiver<bool>) {
        let (running, runs) = watch::channel(false);
        (Self { ctx, job_id, running, session_env }, runs)
    }

    /// What a session's program finds in its environment (nothing for other jobs).
    pub fn session_env(&self) -> &[(&'static str, String)] {
        &self.session_env
    }

    /// The way to the server (to fetch what the job needs).
    pub fn client(&self) -> &crate::client::LzClient {
        &self.ctx.client
    }

    /// The way to the server, for what outlives this call (a gang's exec socket).
    pub fn shared_client(&self) -> Arc<crate::client::LzClient> {
        self.ctx.client.clone()
    }

    /// It waits to run (in a batch system's queue): `reason` says why.
    pub fn waiting(&self, reason: String) {
        self.ctx.book.report(self.job_id, JobStatus::Staging, None, Some(reason), None);
    }

    /// Its session (if it is one) as its record keeps it for a later run of the agent.
    pub fn saved_session(&self) -> Option<crate::sessions::SavedSession> {
        self.ctx.sessions.saved(self.job_id)
    }

    /// It is a session an earlier run of the agent started, as its record kept it.
    pub fn restore_session(&self, saved: crate::sessions::SavedSession) {
        self.ctx.sessions.restore(self.job_id, saved);
    }

    /// Its session's app (if it is a session) is reached as `reach` from now on.
    pub fn session_reach(&self, reach: crate::sessions::Reach) {
        self.ctx.sessions.reach(self.job_id, reach);
    }

    /// Shells can be opened in it with `starter` from now until it ends.
    pub fn shells_open(&self, starter: Arc<dyn crate::shell::ShellStarter>) {
        self.ctx.shells.offer(self.job_id, starter);
    }

    /// Its program started at `at`; `limits` says how its limits are enforced.
    pub fn running(&self, at: chrono::DateTime<chrono::Utc>, limits: String) {
        self.ctx.book.report_started(self.job_id, at, limits);
        self.running.send_replace(true);
    }
}

/// Resolves once a stop is ordered (never, if the switch is gone).
pub(crate) async fn stop_ordered(stop: &mut StopSwitch) -> std::time::Duration {
    let grace = stop.wait_for(Option::is_some).await.map_or(None, |grace| *grace);
    match grace {
        Some(grace) => grace,
        // The switch is gone: no stop can come.
        None => std::future::pending().await,
    }
}
