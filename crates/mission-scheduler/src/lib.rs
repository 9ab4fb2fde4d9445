//! The scheduler: places jobs on landing zones and tracks them.
//!
//! Everything that changes a job after submission is a [`Call`] (a submission, a stop, an agent
//! connecting, heartbeating or reporting, an LZ registered or removed), answered with an
//! [`Outcome`]. One task owns the placement state and takes the calls in order ([`State`]): the
//! queue of ordered sub-queues ([`Queue`], `queue.rs`, its runnable jobs in sorted chunks,
//! `chunks.rs`), the landing zones with what they hold (`fleet.rs`), what the projects and
//! their users used, for fair-share order (`fair_share.rs`), and the projects' limits on stations
//! (`limits.rs`, with borrowed room reclaimed for a project below its nominal in `reclaim.rs`) and
//! budgets (`budgets.rs`). Its writes go to the store in batches.
//!
//! The server around it (`mission-server`) routes calls here: in one process straight to the
//! task; with several replicas on PostgreSQL the leader runs the task and the others send it their
//! calls as mail through the database. The scheduler reaches back only through two seams: the
//! [`Host`] (the jobs' logs and the agents' tokens) and [`Replicas`] (mail to the other replicas,
//! absent in one process).

mod budgets;
mod chunks;
mod fair_share;
mod fleet;
mod limits;
mod queue;
mod reclaim;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::lz::{Hello, LogOffsets, Order, Report, Welcome};
use mission_api::{Job, PendingKind, PendingReason, QueuePosition};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

pub use self::queue::Queue;
pub use self::state::State;
use mission_store::audit::AuditNote;
use mission_store::{LzIdentity, StoreError};

/// What the scheduler asks of the server it runs in, beyond the store: the parts of a job's life
/// that are not placement.
pub trait Host: Send + Sync + 'static {
    /// A job ended: who follows its logs in this process sees the end.
    fn job_ended(&self, job_id: Uuid);
    /// How much of each of a job's output streams (of its node `node`, a gang's rank) the server
    /// holds, where a retry's output goes on (from the start, for a stream that cannot be read).
    fn log_offsets(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        node: u32,
    ) -> Pin<Box<dyn Future<Output = LogOffsets> + Send + '_>>;
    /// Landing zones were removed or re-keyed: this process's cache of agent tokens must go.
    fn forget_tokens(&self);
}

/// Mail to the other replicas of a cluster, sent without waiting (the server's outbox).
pub trait Replicas: Send + Sync + std::fmt::Debug + 'static {
    /// Answers request `request` of replica `to`.
    fn reply(&self, to: Uuid, request: u64, result: SchedulerResult<Outcome>);
    /// Sends an order down a stream of another replica.
    fn order(&self, session: SessionId, order: Order);
    /// Ends a stream of another replica.
    fn end_session(&self, session: SessionId);
    /// Tells every replica to drop its cached agent tokens.
    fn broadcast_forget_tokens(&self);
    /// Tells every replica that bytes of a job's logs arrived, to wake who follows them there.
    fn broadcast_log_written(&self, job_id: Uuid);
    /// Tells every replica that a job ended, so who follows its logs there sees the end.
    fn broadcast_job_ended(&self, job_id: Uuid);
}

/// What a user may ask of one of their unfinished jobs besides stopping it (Slurm's
/// `scontrol hold|release|requeue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobControl {
    /// Keep a queued job out of placement until released: it keeps its place in line, and its
    /// pending reason says it is held. Held jobs stay held across restarts.
    Hold,
    /// Let a held job be placed again (once what else it waits for has ended).
    Release,
    /// Stop a placed job (`SIGTERM`, then the reclaim grace) and put it back in line at its old
    /// place, as its next run.
    Requeue,
}

impl JobControl {
    /// The verb, as the audit trail and the API's paths say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hold => "hold",
            Self::Release => "release",
            Self::Requeue => "requeue",
        }
    }
}

/// A request to the scheduler.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// Queue a job (already checked by the route); answered with the job.
    Submit {
        /// The job.
        job: Box<Job>,
        /// The audit entries of the request, written with the change.
        #[serde(default)]
        audit: Vec<AuditNote>,
    },
    /// Queue jobs (already checked by the route) that share everything but their ids, array
    /// indices and arguments, so the scheduler's checks take all or, at the first, none;
    /// answered when all are queued.
    SubmitMany {
        /// The jobs.
        jobs: Vec<Job>,
        /// The audit entries of the request, written with the change.
        #[serde(default)]
        audit: Vec<AuditNote>,
    },
    /// Stop a job: dequeue it, or have its LZ kill it.
    Stop {
        /// The job.
        job_id: Uuid,
        /// Who asks, for the job's history.
        by: String,
        /// The audit entries of the request, written with the change.
        #[serde(default)]
        audit: Vec<AuditNote>,
    },
    /// Hold a queued job, release a held one, or requeue a placed one ([`JobControl`]).
    Control {
        /// The job.
        job_id: Uuid,
        /// What is asked.
        control: JobControl,
        /// Who asks, for the job's pending reason and history.
        by: String,
        /// The audit entries of the request, written with the change.
        #[serde(default)]
        audit: Vec<AuditNote>,
    },
    /// An agent connected; answered with its welcome. Its orders go to `session`.
    Connect {
        /// The agent's LZ.
        lz: LzIdentity,
        /// What it said.
        hello: Box<Hello>,
        /// Its order stream.
        session: SessionId,
    },
    /// An agent's order stream ended.
    Disconnected {
        /// The LZ.
        lz_id: Uuid,
        /// The stream that ended.
        session: SessionId,
    },
    /// An agent renews its lease.
    Heartbeat {
        /// The LZ.
        lz_id: Uuid,
    },
    /// An agent reports its jobs' moves.
    Reports {
        /// The agent's LZ.
        lz: LzIdentity,
        /// The moves.
        reports: Vec<Report>,
    },
    /// Have a connected agent open a tunnel for its sessions to the replica at `url`
    /// ([`Order::Tunnel`]); answered when the order is sent, a conflict when the agent is not
    /// connected.
    OpenTunnel {
        /// The agent's LZ.
        lz_id: Uuid,
        /// The replica's own URL; none: the one the agent connects to.
        url: Option<String>,
    },
    /// A landing zone was registered or got a new token.
    Registered {
        /// The LZ.
        lz: LzIdentity,
    },
    /// What a gateway's station has queued that its pilots could run; answered with a demand.
    Demand {
        /// The gateway's LZ.
        lz_id: Uuid,
    },
    /// Remove a pilot whose allocation ended, putting its unfinished jobs back in the queue.
    RemovePilot {
        /// Its station.
        station_id: Uuid,
        /// The pilot's LZ.
        lz_id: Uuid,
    },
    /// A project's limits on a station were set or removed in the store: read them again.
    LimitsChanged {
        /// The project.
        project_id: Uuid,
        /// The station.
        station_id: Uuid,
    },
    /// A station's switches were changed in the store: read whether it reclaims again.
    StationChanged {
        /// The station.
        station_id: Uuid,
    },
    /// A project's budget was set or removed in the store: read it again.
    BudgetChanged {
        /// The project.
        project_id: Uuid,
    },
    /// What every project holds, has queued and has left of its budget; answered with its
    /// gauges.
    ProjectGauges,
    /// What a project's jobs hold and how many wait, per station; answered with its usage.
    ProjectUsage {
        /// The project.
        project_id: Uuid,
    },
    /// Remove a landing zone of a station, or with `lz_id` `None` the whole station.
    Remove {
        /// The station.
        station_id: Uuid,
        /// The LZ, if only one.
        lz_id: Option<Uuid>,
        /// The audit entries of the request, written with the change.
        #[serde(default)]
        audit: Vec<AuditNote>,
    },
}

/// The scheduler's answer to a [`Call`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The job as queued.
    Job {
        /// The job.
        job: Box<Job>,
    },
    /// An agent's welcome.
    Welcome {
        /// The welcome.
        welcome: Box<Welcome>,
    },
    /// A gateway's station's demand.
    Demand {
        /// The demand.
        demand: mission_api::lz::Demand,
    },
    /// What a project holds and has queued, per station where it has either.
    ProjectUsage {
        /// (station, what it holds and has queued there).
        usage: Vec<(Uuid, mission_api::ResourcesInUse)>,
    },
    /// The projects' gauges.
    ProjectGauges {
        /// One per project with jobs placed or queued, or a budget.
        gauges: Vec<ProjectGauge>,
    },
    /// Whether something was removed.
    Removed {
        /// It was.
        removed: bool,
    },
    /// Done, nothing to say.
    Done,
}

/// Why the scheduler refused or failed a call. It crosses between replicas as it is; routes
/// render it as an API error (4xx or 5xx).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", content = "detail", rename_all = "snake_case")]
pub enum SchedulerError {
    /// The call asks for what cannot be (a 400), naming the request field at fault if one is.
    #[error("{detail}")]
    Invalid {
        /// The field.
        field: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// The call clashes with the state of the jobs or landing zones (a 409).
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this (a 403).
    #[error("{0}")]
    Refused(String),
    /// The scheduler cannot answer now: it stopped, or its leader changed (a 503).
    #[error("{0}")]
    Unavailable(String),
    /// The store failed (a 500); the cause, also logged where it happened.
    #[error("the store failed: {0}")]
    Store(String),
}

impl SchedulerError {
    /// A 400 naming `field`.
    pub fn invalid_field(field: &str, detail: impl Into<String>) -> Self {
        Self::Invalid { field: Some(field.to_owned()), detail: format!("{field}: {}", detail.into()) }
    }
}

impl From<StoreError> for SchedulerError {
    fn from(e: StoreError) -> Self {
        tracing::error!(cause = %e, "the scheduler's store failed");
        Self::Store(e.to_string())
    }
}

/// The rules the scheduler keeps, from the server's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long a landing zone's agent may stay silent before its jobs are lost.
    pub lease: Duration,
    /// The most jobs one user may have placed on landing zones at once; more wait in the queue,
    /// their pending reason `quota`. `None`: no limit.
    pub max_running_per_user: Option<u32>,
    /// Which of a station's sub-queues a placement pass takes from first.
    pub order: QueueOrder,
    /// How long a job whose borrowed room is reclaimed may take to end after `SIGTERM`
    /// (whole seconds), before `SIGKILL`.
    pub reclaim_grace: Duration,
}

impl Policy {
    /// The default grace period of reclaimed jobs: 30 s (Kubernetes' default grace period).
    pub const DEFAULT_RECLAIM_GRACE: Duration = Duration::from_secs(30);
}

/// Which of a station's sub-queues a placement pass takes from first (see `queue.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOrder {
    /// The one whose head was submitted first.
    FirstCome,
    /// The one of the project with the least usage against its share, then of the user with
    /// the least usage in it, usage halving every `half_life` (see `fair_share.rs`).
    FairShare {
        /// How long until what was used counts half.
        half_life: Duration,
    },
}

impl QueueOrder {
    /// The default half-life of usage, a week (Slurm's `PriorityDecayHalfLife`).
    pub const DEFAULT_HALF_LIFE: Duration = Duration::from_secs(7 * 24 * 3600);
    /// Fair-share with the default half-life.
    pub const DEFAULT: Self = Self::FairShare { half_life: Self::DEFAULT_HALF_LIFE };
}

/// What a project holds on every station, has queued and has left of its budget this period,
/// and what its jobs drew and cost since the scheduler started: what `/metrics` shows per project.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectGauge {
    /// The project.
    pub project_id: Uuid,
    /// What its placed jobs hold and how many of its jobs wait, over every station.
    pub in_use: mission_api::ResourcesInUse,
    /// CPU-hours left of its budget this period, where it sets some.
    pub budget_left_cpu_hours: Option<f64>,
    /// GPU-hours left of its budget this period, where it sets some.
    pub budget_left_gpu_hours: Option<f64>,
    /// kWh its jobs that ended since the scheduler started were reckoned (a counter).
    #[serde(default)]
    pub energy_kwh: f64,
    /// Grams of CO₂e of the same jobs (a counter).
    #[serde(default)]
    pub co2e_g: f64,
    /// What the same jobs cost, by currency (counters).
    #[serde(default)]
    pub cost: std::collections::BTreeMap<String, f64>,
}

/// What a call comes to.
pub type SchedulerResult<T> = Result<T, SchedulerError>;

/// An agent's order stream: the replica holding its connection, and the stream's number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionId {
    /// The replica ([`Uuid::nil`] in one process).
    pub replica: Uuid,
    /// The stream's number on that replica.
    pub n: u64,
}

/// A call on its way to the scheduler task, with where its answer goes.
pub struct Event {
    /// The call.
    pub call: Call,
    /// Where its answer goes.
    pub reply: Responder,
}

/// Where a call's answer goes.
pub enum Responder {
    /// A caller in this process.
    Local(oneshot::Sender<SchedulerResult<Outcome>>),
    /// A caller on another replica, through the database.
    Remote {
        /// The replica.
        to: Uuid,
        /// The number of its request.
        request: u64,
        /// Mail to it.
        outbox: Arc<dyn Replicas>,
    },
    /// Nobody waits (a disconnection).
    Nobody,
}

impl Responder {
    /// Answers the call.
    pub fn send(self, result: SchedulerResult<Outcome>) {
        match self {
            Self::Local(reply) => drop(reply.send(result)),
            Self::Remote { to, request, outbox } => outbox.reply(to, request, result),
            Self::Nobody => {}
        }
    }
}

/// The order streams of the agents connected to this replica, and the way to the others'.
#[derive(Debug)]
pub struct Sessions {
    replica: Uuid,
    next: AtomicU64,
    local: Mutex<HashMap<u64, mpsc::UnboundedSender<Order>>>,
    outbox: Option<Arc<dyn Replicas>>,
}

impl Sessions {
    /// The sessions of replica `replica`, reaching other replicas' through `outbox`.
    pub fn new(replica: Uuid, outbox: Option<Arc<dyn Replicas>>) -> Self {
        Self { replica, next: AtomicU64::new(0), local: Mutex::new(HashMap::new()), outbox }
    }

    /// Opens an order stream on this replica.
    pub fn open(&self) -> (SessionId, mpsc::UnboundedReceiver<Order>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (orders, rx) = mpsc::unbounded_channel();
        self.local.lock().expect("not poisoned").insert(n, orders);
        (SessionId { replica: self.replica, n }, rx)
    }

    /// Sends an order down a stream, wherever it is.
    pub fn deliver(&self, session: SessionId, order: Order) {
        if session.replica == self.replica {
            self.deliver_here(session.n, order);
        } else if let Some(outbox) = &self.outbox {
            outbox.order(session, order);
        }
    }

    /// Ends a stream, wherever it is (its agent then connects again).
    pub fn end(&self, session: SessionId) {
        if session.replica == self.replica {
            self.end_here(session.n);
        } else if let Some(outbox) = &self.outbox {
            outbox.end_session(session);
        }
    }

    /// Sends an order down a stream of this replica.
    pub fn deliver_here(&self, n: u64, order: Order) {
        if let Some(stream) = self.local.lock().expect("not poisoned").get(&n) {
            let _ = stream.send(order);
        }
    }

    /// Ends a stream of this replica.
    pub fn end_here(&self, n: u64) {
        self.local.lock().expect("not poisoned").remove(&n);
    }

    /// Tells the other replicas to drop their cached agent tokens.
    pub fn broadcast_forget_tokens(&self) {
        if let Some(outbox) = &self.outbox {
            outbox.broadcast_forget_tokens();
        }
    }

    /// Tells the other replicas that bytes of a job's logs arrived here.
    pub fn broadcast_log_written(&self, job_id: Uuid) {
        if let Some(outbox) = &self.outbox {
            outbox.broadcast_log_written(job_id);
        }
    }

    /// Tells the other replicas that a job ended (who follows its logs there sees the end).
    pub fn broadcast_job_ended(&self, job_id: Uuid) {
        if let Some(outbox) = &self.outbox {
            outbox.broadcast_job_ended(job_id);
        }
    }
}

/// Gives a queued job its place in line and, where no placement pass said why it waits (or said
/// that earlier jobs come first), how many jobs are ahead of it: under fair-share the `lighter`
/// ones, queued in projects with less usage against their share ([`Queue::lighter_ahead`]), where
/// there are any; else the earlier jobs of its station.
pub fn stand_in_line(job: &mut Job, position: QueuePosition, lighter: u64) {
    job.position = Some(position);
    let ahead = position.station - 1;
    let behind = match (lighter, ahead) {
        (0, 0) => None,
        (0, 1) => Some("behind 1 earlier queued job of its station".to_owned()),
        (0, ahead) => Some(format!("behind {ahead} earlier queued jobs of its station")),
        (1, _) => Some("behind 1 job of projects with less usage".to_owned()),
        (lighter, _) => Some(format!("behind {lighter} jobs of projects with less usage")),
    };
    match &mut job.pending_reason {
        None => {
            let detail = behind.unwrap_or_else(|| "first in line on its station".to_owned());
            job.pending_reason = Some(PendingReason { kind: PendingKind::Priority, detail });
        }
        Some(reason) if reason.kind == PendingKind::Priority => {
            if let Some(behind) = behind {
                reason.detail = format!("{behind}; {}", reason.detail);
            }
        }
        Some(_) => {}
    }
}
