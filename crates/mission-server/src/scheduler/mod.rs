//! The scheduler: places jobs on landing zones and tracks them.
//!
//! Everything that changes a job after submission is a [`Call`] (a submission, a stop, an agent
//! connecting, heartbeating or reporting, an LZ registered or removed), answered with an
//! [`Outcome`]. One task owns the placement state and takes the calls in order (`state.rs`); in one
//! process (SQLite) every call goes straight to it. With several replicas on PostgreSQL exactly one
//! replica, the leader, runs that task; the others send it their calls as mail through the
//! database and get their answers back the same way (`cluster.rs`). Orders for an agent go
//! to whichever replica holds its connection ([`Sessions`]).

mod chunks;
mod fleet;
pub(crate) mod queue;
pub(crate) mod state;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::lz::{Hello, Order, Report, Welcome};
use mission_api::{Job, PendingKind, PendingReason, QueuePosition};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use self::queue::Queue;
use crate::agent_tokens::AgentTokens;
use crate::cluster::{Cluster, Outbox};
use crate::error::{ApiError, ApiResult};
use crate::job_logs::JobLogs;
use mission_store::{LzIdentity, Store, StoreError};

/// A request to the scheduler.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// Queue a job (already checked by the route); answered with the job.
    Submit {
        /// The job.
        job: Box<Job>,
    },
    /// Queue jobs (already checked by the route) that share everything but their ids, array
    /// indices and arguments, so the scheduler's checks take all or, at the first, none;
    /// answered when all are queued.
    SubmitMany {
        /// The jobs.
        jobs: Vec<Job>,
    },
    /// Stop a job: dequeue it, or have its LZ kill it.
    Stop {
        /// The job.
        job_id: Uuid,
        /// Who asks, for the job's history.
        by: String,
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
    /// Remove a landing zone of a station, or with `lz_id` `None` the whole station.
    Remove {
        /// The station.
        station_id: Uuid,
        /// The LZ, if only one.
        lz_id: Option<Uuid>,
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
    /// Whether something was removed.
    Removed {
        /// It was.
        removed: bool,
    },
    /// Done, nothing to say.
    Done,
}

/// Why the scheduler refused or failed a call. It crosses between replicas as it is; routes
/// render it as an [`ApiError`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
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

impl From<SchedulerError> for ApiError {
    fn from(e: SchedulerError) -> Self {
        match e {
            SchedulerError::Invalid { field: Some(field), detail } => ApiError::invalid(detail).with_field(field),
            SchedulerError::Invalid { field: None, detail } => ApiError::invalid(detail),
            SchedulerError::Conflict(detail) => ApiError::conflict(detail),
            SchedulerError::Refused(detail) => ApiError::forbidden(detail),
            SchedulerError::Unavailable(detail) => ApiError::unavailable(detail),
            SchedulerError::Store(cause) => ApiError::internal(cause),
        }
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
pub(crate) struct Event {
    pub call: Call,
    pub reply: Responder,
}

/// Where a call's answer goes.
pub(crate) enum Responder {
    /// A caller in this process.
    Local(oneshot::Sender<SchedulerResult<Outcome>>),
    /// A caller on another replica, through the database.
    Remote {
        /// The replica.
        to: Uuid,
        /// The number of its request.
        request: u64,
        /// Mail to it.
        outbox: Outbox,
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
    outbox: Option<Outbox>,
}

impl Sessions {
    /// The sessions of replica `replica`, reaching other replicas' through `outbox`.
    pub(crate) fn new(replica: Uuid, outbox: Option<Outbox>) -> Self {
        Self { replica, next: AtomicU64::new(0), local: Mutex::new(HashMap::new()), outbox }
    }

    /// Opens an order stream on this replica.
    fn open(&self) -> (SessionId, mpsc::UnboundedReceiver<Order>) {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (orders, rx) = mpsc::unbounded_channel();
        self.local.lock().expect("not poisoned").insert(n, orders);
        (SessionId { replica: self.replica, n }, rx)
    }

    /// Sends an order down a stream, wherever it is.
    pub(crate) fn deliver(&self, session: SessionId, order: Order) {
        if session.replica == self.replica {
            self.deliver_here(session.n, order);
        } else if let Some(outbox) = &self.outbox {
            outbox.order(session, order);
        }
    }

    /// Ends a stream, wherever it is (its agent then connects again).
    pub(crate) fn end(&self, session: SessionId) {
        if session.replica == self.replica {
            self.end_here(session.n);
        } else if let Some(outbox) = &self.outbox {
            outbox.end_session(session);
        }
    }

    /// Sends an order down a stream of this replica.
    pub(crate) fn deliver_here(&self, n: u64, order: Order) {
        if let Some(stream) = self.local.lock().expect("not poisoned").get(&n) {
            let _ = stream.send(order);
        }
    }

    /// Ends a stream of this replica.
    pub(crate) fn end_here(&self, n: u64) {
        self.local.lock().expect("not poisoned").remove(&n);
    }

    /// Tells the other replicas to drop their cached agent tokens.
    pub(crate) fn broadcast_forget_tokens(&self) {
        if let Some(outbox) = &self.outbox {
            outbox.broadcast_forget_tokens();
        }
    }

    /// Tells the other replicas that a job ended (who follows its logs there sees the end).
    pub(crate) fn broadcast_job_ended(&self, job_id: Uuid) {
        if let Some(outbox) = &self.outbox {
            outbox.broadcast_job_ended(job_id);
        }
    }
}

/// The orders for one agent connection, after its [`Welcome`].
pub struct Session {
    /// What the agent is told on connecting.
    pub welcome: Welcome,
    /// Orders as the scheduler issues them; ends when a newer connection of the LZ replaces this
    /// one, the LZ's lease runs out or the LZ is removed.
    pub orders: mpsc::UnboundedReceiver<Order>,
    /// Identifies this connection in [`Scheduler::disconnected`].
    pub session_id: SessionId,
}

/// How long a replica waits for the leader's answer before giving up with a 503.
const REMOTE_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// Handle to the scheduler; cheap to clone.
#[derive(Clone, Debug)]
pub struct Scheduler {
    route: Route,
    sessions: Arc<Sessions>,
    /// The queue the scheduler's task keeps, while this process runs it: positions are read here.
    queue: Arc<Mutex<Queue>>,
}

#[derive(Clone, Debug)]
enum Route {
    /// One process: the scheduler task is always here.
    Single(mpsc::UnboundedSender<Event>),
    /// One replica of several: the task runs wherever the leader is.
    Replica(Arc<Cluster>),
}

impl Scheduler {
    /// Starts the scheduler: in one process, its task at once (its state rebuilt from the store);
    /// on a shared PostgreSQL store, this replica's part in the cluster, whose leader runs it.
    /// Its tasks run on `tasks` and end when `shutdown` is cancelled.
    pub async fn start(
        store: Store,
        logs: Arc<JobLogs>,
        tokens: Arc<AgentTokens>,
        policy: Policy,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self, StoreError> {
        if let Some(db) = store.cluster() {
            let cluster = Cluster::join(db, store, logs, tokens, policy, tasks, shutdown).await?;
            return Ok(Self { sessions: cluster.sessions(), queue: cluster.queue(), route: Route::Replica(cluster) });
        }
        let queue = Arc::new(Mutex::new(Queue::default()));
        let sessions = Arc::new(Sessions::new(Uuid::nil(), None));
        let (events, rx) = mpsc::unbounded_channel();
        let state = state::State::rebuilt(store, logs, tokens, policy, sessions.clone(), queue.clone()).await?;
        tasks.spawn(state.run(rx, shutdown));
        Ok(Self { route: Route::Single(events), sessions, queue })
    }

    async fn ask(&self, call: Call) -> ApiResult<Outcome> {
        self.call(call).await.map_err(ApiError::from)
    }

    async fn call(&self, call: Call) -> SchedulerResult<Outcome> {
        let stopped = || SchedulerError::Unavailable("the scheduler has stopped".into());
        let events = match &self.route {
            Route::Single(events) => events.clone(),
            Route::Replica(cluster) => match cluster.leading() {
                Some(events) => events,
                None => {
                    return tokio::time::timeout(REMOTE_ANSWER_TIMEOUT, cluster.request(call)).await.unwrap_or_else(
                        |_| Err(SchedulerError::Unavailable("the scheduler's leader did not answer; try again".into())),
                    );
                }
            },
        };
        let (reply, answer) = oneshot::channel();
        events.send(Event { call, reply: Responder::Local(reply) }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Bytes of a job's logs arrived at this replica: wakes who follows them on the others.
    pub fn log_written(&self, job_id: Uuid) {
        if let Some(outbox) = &self.sessions.outbox {
            outbox.broadcast_log_written(job_id);
        }
    }

    /// Whether this process runs the scheduler's task (always, in one process; while it leads,
    /// among replicas).
    pub fn leads(&self) -> bool {
        match &self.route {
            Route::Single(_) => true,
            Route::Replica(cluster) => cluster.leading().is_some(),
        }
    }

    fn tell(&self, call: Call) {
        match &self.route {
            Route::Single(events) => drop(events.send(Event { call, reply: Responder::Nobody })),
            Route::Replica(cluster) => match cluster.leading() {
                Some(events) => drop(events.send(Event { call, reply: Responder::Nobody })),
                None => cluster.tell(call),
            },
        }
    }

    /// How many jobs are queued on `stations` (all, when empty) of `user` (anyone's, when
    /// `None`), from the scheduler's own queue where this process runs it; `None` elsewhere.
    pub fn queued_count(&self, stations: &[Uuid], user: Option<Uuid>) -> Option<u64> {
        self.leads().then(|| self.queue.lock().expect("not poisoned").count(stations, user))
    }

    /// Where a page of the queued jobs of `stations` (all, when empty) of `user` (anyone's, when
    /// `None`), newest first, starts once the `skip` newest are passed (counted down its line),
    /// from the scheduler's own queue where this process runs it; `None` elsewhere, or where
    /// the jobs stand in more than one line.
    pub fn queued_page_start(&self, stations: &[Uuid], user: Option<Uuid>, skip: u64) -> Option<u64> {
        self.leads().then(|| self.queue.lock().expect("not poisoned").page_start(stations, user, skip)).flatten()
    }

    /// Fills in where each queued job of `jobs` stands in line ([`Job::position`]) and, for one
    /// that no placement pass has looked at, why it waits: behind how many earlier jobs. Counted
    /// in the scheduler's own queue where this process runs it (in memory, without a walk), by
    /// the store on a replica that does not lead.
    pub async fn place_in_line(&self, store: &Store, jobs: &mut [Job]) -> Result<(), StoreError> {
        let queued: Vec<Uuid> =
            jobs.iter().filter(|j| j.status == mission_api::JobStatus::Queued).map(|j| j.job_id).collect();
        if queued.is_empty() {
            return Ok(());
        }
        let positions: HashMap<Uuid, QueuePosition> = if self.leads() {
            let queue = self.queue.lock().expect("not poisoned");
            queued.iter().filter_map(|id| queue.position(*id).map(|p| (*id, p))).collect()
        } else {
            store.queue_positions(&queued).await?
        };
        for job in jobs {
            if let Some(position) = positions.get(&job.job_id) {
                stand_in_line(job, *position);
            }
        }
        Ok(())
    }

    /// Queues a job (already checked and resolved by the route) and places it if it fits; a job
    /// no LZ of its station could ever hold is refused with a 400.
    pub async fn submit(&self, job: Job) -> ApiResult<Job> {
        match self.ask(Call::Submit { job: Box::new(job) }).await? {
            Outcome::Job { job } => Ok(*job),
            other => Err(unexpected(other)),
        }
    }

    /// Queues jobs that differ only in their ids, array indices and arguments (a job array).
    pub async fn submit_many(&self, jobs: Vec<Job>) -> ApiResult<()> {
        self.ask(Call::SubmitMany { jobs }).await.map(drop)
    }

    /// Stops a job: dequeues it, or has its LZ kill it.
    pub async fn stop(&self, job_id: Uuid, by: String) -> ApiResult<()> {
        self.ask(Call::Stop { job_id, by }).await.map(drop)
    }

    /// An agent connects: its resources are recorded and its orders start.
    pub async fn connect(&self, lz: LzIdentity, hello: Hello) -> ApiResult<Session> {
        let (session_id, orders) = self.sessions.open();
        let outcome = self.ask(Call::Connect { lz, hello: Box::new(hello), session: session_id }).await;
        match outcome {
            Ok(Outcome::Welcome { welcome }) => Ok(Session { welcome: *welcome, orders, session_id }),
            other => {
                self.sessions.end_here(session_id.n);
                Err(other.err().unwrap_or_else(|| ApiError::internal("the scheduler answered a connect oddly")))
            }
        }
    }

    /// An agent's order stream ended.
    pub fn disconnected(&self, lz_id: Uuid, session: SessionId) {
        self.sessions.end_here(session.n);
        self.tell(Call::Disconnected { lz_id, session });
    }

    /// An agent renews its lease; a 409 tells it to connect again.
    pub async fn heartbeat(&self, lz_id: Uuid) -> ApiResult<()> {
        self.ask(Call::Heartbeat { lz_id }).await.map(drop)
    }

    /// An agent reports its jobs' moves.
    pub async fn reports(&self, lz: LzIdentity, reports: Vec<Report>) -> ApiResult<()> {
        self.ask(Call::Reports { lz, reports }).await.map(drop)
    }

    /// A landing zone was registered, or got a new token: jobs may now name it.
    pub fn registered(&self, lz: LzIdentity) {
        self.tell(Call::Registered { lz });
    }

    /// What a gateway's station has queued that its pilots could run.
    pub async fn demand(&self, lz_id: Uuid) -> ApiResult<mission_api::lz::Demand> {
        match self.ask(Call::Demand { lz_id }).await? {
            Outcome::Demand { demand } => Ok(demand),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a pilot whose allocation ended; its unfinished jobs go back in the queue.
    pub async fn remove_pilot(&self, station_id: Uuid, lz_id: Uuid) -> ApiResult<bool> {
        match self.ask(Call::RemovePilot { station_id, lz_id }).await? {
            Outcome::Removed { removed } => Ok(removed),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a landing zone of a station (or, with `lz_id` `None`, the station with all of them)
    /// from the store and from placement; a 409 while jobs that have not ended are queued for it
    /// or placed on it. Answers false when there was nothing to remove.
    pub async fn remove(&self, station_id: Uuid, lz_id: Option<Uuid>) -> ApiResult<bool> {
        match self.ask(Call::Remove { station_id, lz_id }).await? {
            Outcome::Removed { removed } => Ok(removed),
            other => Err(unexpected(other)),
        }
    }
}

/// Gives a queued job its place in line and, where no placement pass said why it waits (or said
/// that earlier jobs come first), how many jobs of its station are ahead.
pub(crate) fn stand_in_line(job: &mut Job, position: QueuePosition) {
    job.position = Some(position);
    let ahead = position.station - 1;
    let jobs = if ahead == 1 { "job" } else { "jobs" };
    match &mut job.pending_reason {
        None => {
            let detail = if ahead == 0 {
                "first in line on its station".to_owned()
            } else {
                format!("behind {ahead} earlier queued {jobs} of its station")
            };
            job.pending_reason = Some(PendingReason { kind: PendingKind::Priority, detail });
        }
        Some(reason) if reason.kind == PendingKind::Priority && ahead > 0 => {
            reason.detail = format!("behind {ahead} earlier queued {jobs} of its station; {}", reason.detail);
        }
        Some(_) => {}
    }
}

fn unexpected(outcome: Outcome) -> ApiError {
    ApiError::internal(format!("the scheduler answered {outcome:?}"))
}
