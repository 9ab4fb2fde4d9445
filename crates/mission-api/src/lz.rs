//! The landing-zone protocol under `/api/v1/lz`: what an agent and the server say to each other.
//!
//! The agent connects out (the LZ host needs no inbound port), authenticated by its token:
//! 1. `POST /lz/connect` with a [`Hello`] (resources, GPUs, the jobs it still runs): the answer
//!    is a long-lived stream of JSON lines (`application/x-ndjson`), first a [`Welcome`] (its
//!    identity, the lease, the jobs it must drop), then [`Order`]s as they come (new jobs, stops,
//!    and a ping whenever nothing else was sent for a third of the lease). The connection is the
//!    agent's session: when it breaks, the agent connects again, naming the jobs it still runs;
//! 2. `POST /lz/heartbeat` within every lease (a 409 answers that the server does not know this
//!    session: connect again), `POST /lz/reports` with [`Report`]s as jobs move,
//!    `POST /lz/jobs/{id}/logs/{stdout|stderr}` with output as it is written, `GET
//!    /lz/jobs/{id}/files/{path}` for inputs and `PUT /lz/jobs/{id}/results/{path}` for results
//!    (`?offset=` says where a log chunk starts; a chunk the server has already is taken again
//!    harmlessly).
//!
//! A gateway into a batch system (its landing zone registered with a cluster account) may run
//! *pilots* instead of one batch job per mission job: `GET /lz/demand` tells it the [`Demand`] of
//! its station, `POST /lz/pilots` registers a pilot (an ephemeral landing zone of the same
//! station, answered as `RegisteredLandingZone` with its token), which connects as any agent
//! does, and `DELETE /lz/pilots/{id}` removes one when its allocation ended, putting the jobs it
//! had not finished back in the queue.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::jobs::JobStatus;
use crate::stations::Resources;

/// One GPU an agent found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    /// Index as `CUDA_VISIBLE_DEVICES` counts it.
    pub index: u32,
    /// Model name.
    pub name: String,
    /// Memory in megabytes.
    pub memory_amount: u64,
    /// The device's UUID.
    pub uuid: String,
}

/// Body of `POST /api/v1/lz/connect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// What the LZ offers to jobs.
    pub resources: Resources,
    /// The GPUs behind `resources.gpu_count`.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// Jobs the agent still runs (after a reconnect).
    #[serde(default)]
    pub running: Vec<Uuid>,
    /// Set by a gateway into a batch system (Slurm): it takes up to this many jobs at once,
    /// each within `resources` (the largest node), and the batch system queues them; the
    /// server then counts jobs instead of free CPUs, memory and GPUs, and hands out no GPU
    /// indices (the batch system chooses the devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    /// The cluster account a gateway runs as and submits its jobs as; it must be the one the
    /// landing zone was registered with (see `RegisterLandingZone::cluster_account`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_account: Option<String>,
    /// Whether it runs jobs in container images (it has a container engine).
    #[serde(default)]
    pub images: bool,
    /// The directories it shares with the hosts users submit batch jobs from (`--shared-path`),
    /// absolute: only batch jobs submitted under one of them run here ([`crate::batch`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_paths: Vec<String>,
    /// Megabytes free where it keeps jobs' files, as it connects; none where it cannot tell (a
    /// batch-system gateway, whose jobs run on the cluster's nodes). A job that needs more disk
    /// than this is not placed here ([`crate::tes::JobTask::disk_mb`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// The address the ranks of a job on several landing zones reach this one at
    /// (`mission lz --node-address`); none: its host's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_address: Option<String>,
    /// Agent version.
    pub version: String,
}

impl Hello {
    /// A plain host's hello: `resources`, no GPUs to hand out, no jobs running, no images, no
    /// shared directories, its disk unknown, from agent `version`.
    pub fn plain(resources: Resources, version: impl Into<String>) -> Self {
        Self {
            resources,
            gpus: Vec::new(),
            running: Vec::new(),
            max_jobs: None,
            cluster_account: None,
            images: false,
            shared_paths: Vec::new(),
            disk_mb: None,
            node_address: None,
            version: version.into(),
        }
    }
}

/// Whether `dir` (absolute, clean) lies in one of `shared` (absolute): `/home/ada/run` lies in
/// `/home` and in `/`, not in `/ho`.
pub fn shares(shared: &[String], dir: &str) -> bool {
    shared.iter().any(|root| {
        let root = root.trim_end_matches('/');
        dir == root || root.is_empty() || dir.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Answer of `POST /api/v1/lz/connect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The LZ the token belongs to.
    pub lz_id: Uuid,
    /// Its station.
    pub station_id: Uuid,
    /// Its name.
    pub name: String,
    /// Seconds of silence after which the server gives up on the LZ and its jobs.
    pub lease_seconds: u64,
    /// Jobs of `Hello::running` the server no longer wants run (stopped or lost meanwhile).
    pub drop: Vec<Uuid>,
}

/// What a job needs to run, as the server hands it to an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The job.
    pub job_id: Uuid,
    /// Its mission.
    pub mission_id: Uuid,
    /// The user who started it.
    #[serde(default)]
    pub user_id: Uuid,
    /// That user's name (a gateway that runs each user's jobs as a cluster account of their
    /// own maps it to one).
    #[serde(default)]
    pub username: String,
    /// Whether that user is an admin or owns the landing zone's station: someone its operator
    /// trusts with the host. An agent that cannot run jobs as users of their own runs only these
    /// users' jobs, unless its operator allows everyone's.
    #[serde(default)]
    pub user_is_operator: bool,
    /// Program and arguments, run in the work dir.
    pub command: Vec<String>,
    /// CPUs.
    pub cpu_count: u32,
    /// Memory in megabytes.
    pub memory_amount: u64,
    /// GPUs.
    #[serde(default)]
    pub gpu_count: u32,
    /// GPU indices on this LZ (none on a batch-system gateway: the batch system chooses).
    pub gpu_indices: Vec<u32>,
    /// Minutes the job may run; the agent ends it after (`failed`, reason "time limit").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<u32>,
    /// The mission's input files to stage.
    pub files: Vec<InputFile>,
    /// Its index in its job array, set as `MISSION_ARRAY_INDEX` for its program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_index: Option<u32>,
    /// Which attempt of the job this is, from 1 ([`crate::RetryPolicy`]); its reports say so.
    #[serde(default = "crate::jobs::first_attempt")]
    pub attempt: u32,
    /// Where this attempt's output starts in each of the job's logs (after the earlier
    /// attempts'): the offsets its log chunks count from.
    #[serde(default)]
    pub log_offsets: LogOffsets,
    /// The container image to run the command in (its archive at
    /// `GET /api/v1/lz/jobs/{id}/image`); none: on the host. Only landing zones that take
    /// images ([`Hello::images`]) are given such jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<crate::jobs::JobImage>,
    /// The interactive session it is, if it is one ([`crate::sessions`]): the agent picks its
    /// port, serves it through a tunnel ([`Order::Tunnel`]) and ends it once idle for its idle
    /// timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<crate::SessionRequest>,
    /// The network its container gets, as its station sets it (the landing zone may allow less).
    #[serde(default)]
    pub container_network: crate::ContainerNetwork,
    /// The batch script it runs, if it is a batch job ([`crate::batch`]): in its directory, as
    /// its user's mapped account, with its output in files there; nothing staged or collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::JobBatch>,
    /// The GA4GH TES task it runs, if it is one ([`crate::tes`]): its inputs fetched and put in
    /// place, then its executors run one after another, each in its image, then its outputs
    /// uploaded; `command` and `image` are its first executor's, for what is shown of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Box<crate::tes::TaskAssignment>>,
    /// Its number ([`crate::Job::number`]), and its array's, for the `SLURM_*` variables.
    #[serde(default)]
    pub number: u64,
    /// Its array's number, if it is an element of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_number: Option<u64>,
    /// Its part of a job on several landing zones (a gang): which node this is and who the
    /// others are. None for a job of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<GangNode>,
    /// The signal it gets before its time limit, and before a graceful stop ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<crate::WarningSignal>,
    /// Whether it goes back in line when its time limit, a reclaim or a lost node ends it (a
    /// Slurm gateway asks Slurm to requeue it too).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue: bool,
}

/// One landing zone's part of a job on several (a gang).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GangNode {
    /// How many nodes the job runs on.
    pub nodes: u32,
    /// Its rank, 0 to `nodes - 1`; rank 0's exit is the job's.
    pub rank: u32,
    /// The nodes' addresses, in rank order ([`Hello::node_address`]).
    pub hosts: Vec<String>,
    /// Whether the command runs here ([`crate::Launch::Each`], or rank 0), or the node is only
    /// held for rank 0 to start processes on.
    pub launch: crate::Launch,
}

impl GangNode {
    /// Whether the job's command runs on this node (else it only holds the node).
    pub fn runs_command(&self) -> bool {
        self.rank == 0 || self.launch == crate::Launch::Each
    }
}

/// The environment variable a job array's element finds its index in.
pub const ARRAY_INDEX_VARIABLE: &str = "MISSION_ARRAY_INDEX";

/// Offsets into a job's two logs ([`Assignment::log_offsets`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogOffsets {
    /// Into `stdout`.
    pub stdout: u64,
    /// Into `stderr`.
    pub stderr: u64,
}

impl LogOffsets {
    /// The offset into the stream named `stream` (one of [`LOG_STREAMS`]).
    pub fn of(&self, stream: &str) -> u64 {
        if stream == "stderr" { self.stderr } else { self.stdout }
    }
}

/// One input file of an [`Assignment`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Path relative to the mission root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content, hex; the agent checks it and caches by it.
    pub sha256: String,
}

/// One line of the `GET /api/v1/lz/orders` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Order {
    /// Run this job.
    Run(Box<Assignment>),
    /// Stop this job: `SIGTERM` to its processes, then, after `grace_seconds` (at once when 0),
    /// `SIGKILL` to its whole process tree.
    Stop {
        /// The job.
        job_id: Uuid,
        /// How long the job may take to end after `SIGTERM`: reclaimed jobs get the server's
        /// grace period; a user's stop kills at once. Older agents ignore it and kill at once.
        #[serde(default, skip_serializing_if = "is_zero")]
        grace_seconds: u32,
    },
    /// Open a tunnel for sessions to the replica at `url` (`GET {url}/api/v1/lz/tunnel`,
    /// upgraded), unless one to it is open: the server proxies requests to this landing zone's
    /// sessions through it.
    Tunnel {
        /// The replica's own URL; none: the URL the agent connects to (one replica).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
    /// Nothing new; the connection is alive.
    Ping,
}

/// A job's move, reported by the agent in `POST /api/v1/lz/reports` (a JSON array).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The job.
    pub job_id: Uuid,
    /// The status it entered: `staging`, `running`, `uploading`, or a final one.
    pub status: JobStatus,
    /// When.
    pub at: DateTime<Utc>,
    /// The exit status, with a final status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it failed or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How limits were enforced (with `running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<String>,
    /// What the job used (with a final status, where measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::JobUsage>,
    /// The attempt of the job it tells of ([`Assignment::attempt`]): the server takes reports of
    /// the job's current attempt only. Absent from agents older than retries, whose reports
    /// are taken as they come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What the attempt of a TES task left (with a final status): its executors' logs, its
    /// outputs, what the landing zone has to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_log: Option<Box<crate::tes::TesTaskLog>>,
}

impl Report {
    /// A job's move to `status` at `at`, saying nothing more.
    pub fn new(job_id: Uuid, status: JobStatus, at: DateTime<Utc>) -> Self {
        Self {
            job_id,
            status,
            at,
            exit_code: None,
            reason: None,
            limits: None,
            usage: None,
            attempt: None,
            task_log: None,
        }
    }
}

/// Names of the two output streams in `POST /api/v1/lz/jobs/{id}/logs/{stream}`.
pub const LOG_STREAMS: [&str; 2] = ["stdout", "stderr"];

/// Answer of `GET /api/v1/lz/demand` to a gateway running pilots: the work its station has
/// queued that no connected landing zone takes now and that a pilot (a job the size of the
/// gateway's `resources`) could run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    /// Queued jobs.
    pub queued_jobs: u32,
    /// Their CPUs, in all.
    pub queued_cpus: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
