//! What runs a landing zone's jobs: the seam between the agent's connection (the same for every
//! runner) and the place jobs run. Two runners implement it:
//! - [`process`]: child processes of the agent on its own host, under cgroup limits in a sandbox;
//! - [`slurm`]: jobs of a Slurm cluster, submitted from its login node.
//!
//! A runner has the agent stage a job's inputs into its content cache (`Agent::stage_inputs`,
//! the one staging loop), runs it, streams its output and uploads its results with the shared
//! pieces in `output`, and reports each move through the agent (the final one included).

pub mod process;
pub mod slurm;

use std::sync::Arc;

use mission_api::Resources;
use mission_api::lz::{Assignment, Gpu};
use tokio::sync::watch;
use uuid::Uuid;

use crate::agent::Agent;

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

/// Runs the jobs of one landing zone.
pub(crate) trait Runner: Send + Sync + 'static {
    /// What the landing zone offers now (asked at every connection: a cluster's nodes change).
    fn offer(&self) -> impl Future<Output = Offer> + Send;

    /// Runs `job` to its end, reporting every move; a stop switched on in `stop` ends it.
    fn run(
        self: Arc<Self>,
        agent: Arc<Agent>,
        job: Assignment,
        stop: StopSwitch,
    ) -> impl Future<Output = ()> + Send + 'static;

    /// Jobs a previous run of the agent left running that this one can follow to their ends,
    /// with the attempt of each.
    fn recovered(&self) -> Vec<(Uuid, u32)> {
        Vec::new()
    }

    /// Follows a job of [`Runner::recovered`] to its end, as [`Runner::run`] would have (never
    /// called where nothing is recovered).
    fn resume(
        self: Arc<Self>,
        agent: Arc<Agent>,
        job_id: Uuid,
        stop: StopSwitch,
    ) -> impl Future<Output = ()> + Send + 'static {
        let _ = (agent, job_id, stop);
        std::future::ready(())
    }

    /// The agent is up (its client made, its jobs resumed): start what works beside the jobs.
    fn attach(self: &Arc<Self>, agent: &Arc<Agent>) {
        let _ = agent;
    }

    /// Whether its jobs run on when the agent stops (a batch system's, which a restarted agent
    /// resumes); else the agent kills them as it leaves.
    const JOBS_OUTLIVE_AGENT: bool = false;
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

/// How a job stopped while its inputs were staged ends.
pub(crate) fn stopped_before_start() -> process::Outcome {
    (mission_api::JobStatus::Stopped, None, Some("stopped before it started".into()))
}
