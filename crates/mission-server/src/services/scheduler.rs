//! The server's handle on the scheduler (`mission-scheduler`): it routes every [`Call`] to the
//! scheduler's task, straight to it in one process (SQLite); with several replicas on
//! PostgreSQL exactly one replica, the leader, runs that task, and the others send it their calls
//! as mail through the database and get their answers back the same way (`cluster.rs`). Orders
//! for an agent go to whichever replica holds its connection ([`Sessions`]). Here too: what the
//! scheduler's [`Host`] is in this server (the jobs' logs, the agents' token cache), and its
//! errors as API errors.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::lz::{Hello, LogOffsets, Order, Report, Welcome};
use mission_api::{Job, QueuePosition};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::services::agent_tokens::AgentTokens;
use crate::services::cluster::Cluster;
use crate::services::job_logs::{JobLogs, LogStream};
pub use mission_scheduler::{
    Call, Event, Host, JobControl, Outcome, Policy, Queue, QueueOrder, Replicas, Responder, SchedulerError,
    SchedulerResult, SessionId, Sessions, State, stand_in_line,
};
use mission_store::audit;
use mission_store::{LzIdentity, Store, StoreError};

/// The scheduler's [`Host`] in this server.
pub(crate) struct LogsAndTokens {
    /// The jobs' logs.
    pub logs: Arc<JobLogs>,
    /// The agents' token cache.
    pub tokens: Arc<AgentTokens>,
}

impl Host for LogsAndTokens {
    fn job_ended(&self, job_id: Uuid) {
        self.logs.finish(job_id);
    }

    fn log_offsets(
        &self,
        mission_id: Uuid,
        job_id: Uuid,
        node: u32,
    ) -> Pin<Box<dyn Future<Output = LogOffsets> + Send + '_>> {
        Box::pin(async move {
            let mut offsets = LogOffsets::default();
            let streams = [(LogStream::STDOUT, &mut offsets.stdout), (LogStream::STDERR, &mut offsets.stderr)];
            for (stream, offset) in streams.map(|(stream, offset)| (stream.of_node(node), offset)) {
                // Should the log not be readable, the attempt's output counts from its start
                // (and what is already there hides as much of it).
                match self.logs.received(mission_id, job_id, stream).await {
                    Ok(received) => *offset = received,
                    Err(e) => tracing::warn!(%job_id, "reading the size of the job's {}: {e}", stream.name()),
                }
            }
            offsets
        })
    }

    fn forget_tokens(&self) {
        self.tokens.forget();
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
        let host = Arc::new(LogsAndTokens { logs, tokens });
        let state = State::rebuilt(store, host, policy, sessions.clone(), queue.clone()).await?;
        tasks.spawn(state.run(rx, shutdown));
        Ok(Self { route: Route::Single(events), sessions, queue })
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
        self.sessions.broadcast_log_written(job_id);
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
        // Who is ahead under fair-share is known to the leader only: elsewhere, positions alone.
        let positions: HashMap<Uuid, (QueuePosition, u64)> = if self.leads() {
            let queue = self.queue.lock().expect("not poisoned");
            queued.iter().filter_map(|id| queue.position(*id).map(|p| (*id, (p, queue.lighter_ahead(*id))))).collect()
        } else {
            store.queue_positions(&queued).await?.into_iter().map(|(id, p)| (id, (p, 0))).collect()
        };
        for job in jobs {
            if let Some((position, lighter)) = positions.get(&job.job_id) {
                stand_in_line(job, *position, *lighter);
            }
        }
        Ok(())
    }

    /// Queues a job (already checked and resolved by the route) and places it if it fits; a job
    /// no LZ of its station could ever hold is refused with a 400.
    pub async fn submit(&self, job: Job) -> SchedulerResult<Job> {
        match self.call(Call::Submit { job: Box::new(job), audit: audit::take() }).await? {
            Outcome::Job { job } => Ok(*job),
            other => Err(unexpected(other)),
        }
    }

    /// Queues jobs that differ only in their ids, array indices and arguments (a job array).
    pub async fn submit_many(&self, jobs: Vec<Job>) -> SchedulerResult<()> {
        self.call(Call::SubmitMany { jobs, audit: audit::take() }).await.map(drop)
    }

    /// Stops a job: dequeues it, or has its LZ kill it.
    pub async fn stop(&self, job_id: Uuid, by: String) -> SchedulerResult<()> {
        self.call(Call::Stop { job_id, by, audit: audit::take() }).await.map(drop)
    }

    /// Holds, releases or requeues a job ([`JobControl`]).
    pub async fn control(&self, job_id: Uuid, control: JobControl, by: String) -> SchedulerResult<()> {
        self.call(Call::Control { job_id, control, by, audit: audit::take() }).await.map(drop)
    }

    /// An agent connects: its resources are recorded and its orders start.
    pub async fn connect(&self, lz: LzIdentity, hello: Hello) -> SchedulerResult<Session> {
        let (session_id, orders) = self.sessions.open();
        let outcome = self.call(Call::Connect { lz, hello: Box::new(hello), session: session_id }).await;
        match outcome {
            Ok(Outcome::Welcome { welcome }) => Ok(Session { welcome: *welcome, orders, session_id }),
            other => {
                self.sessions.end_here(session_id.n);
                Err(match other {
                    Ok(outcome) => unexpected(outcome),
                    Err(e) => e,
                })
            }
        }
    }

    /// An agent's order stream ended.
    pub fn disconnected(&self, lz_id: Uuid, session: SessionId) {
        self.sessions.end_here(session.n);
        self.tell(Call::Disconnected { lz_id, session });
    }

    /// An agent renews its lease; a 409 tells it to connect again.
    pub async fn heartbeat(&self, lz_id: Uuid) -> SchedulerResult<()> {
        self.call(Call::Heartbeat { lz_id }).await.map(drop)
    }

    /// Has a connected agent open a tunnel for its sessions to the replica at `url`.
    pub async fn open_tunnel(&self, lz_id: Uuid, url: Option<String>) -> SchedulerResult<()> {
        self.call(Call::OpenTunnel { lz_id, url }).await.map(drop)
    }

    /// An agent reports its jobs' moves.
    pub async fn reports(&self, lz: LzIdentity, reports: Vec<Report>) -> SchedulerResult<()> {
        self.call(Call::Reports { lz, reports }).await.map(drop)
    }

    /// A landing zone was registered, or got a new token: jobs may now name it.
    pub fn registered(&self, lz: LzIdentity) {
        self.tell(Call::Registered { lz });
    }

    /// What a gateway's station has queued that its pilots could run.
    pub async fn demand(&self, lz_id: Uuid) -> SchedulerResult<mission_api::lz::Demand> {
        match self.call(Call::Demand { lz_id }).await? {
            Outcome::Demand { demand } => Ok(demand),
            other => Err(unexpected(other)),
        }
    }

    /// A project's limits on a station were set or removed in the store: placement reads them
    /// again (and the station gets a pass).
    pub async fn limits_changed(&self, project_id: Uuid, station_id: Uuid) -> SchedulerResult<()> {
        self.call(Call::LimitsChanged { project_id, station_id }).await.map(drop)
    }

    /// A station's switches were changed in the store: placement reads whether it reclaims
    /// borrowed room again.
    pub async fn station_changed(&self, station_id: Uuid) -> SchedulerResult<()> {
        self.call(Call::StationChanged { station_id }).await.map(drop)
    }

    /// A project's budget was set or removed in the store: placement reads it again (and warns
    /// the project's members at once where it is 80% spent).
    pub async fn budget_changed(&self, project_id: Uuid) -> SchedulerResult<()> {
        self.call(Call::BudgetChanged { project_id }).await.map(drop)
    }

    /// Every project's gauges: what it holds, has queued and has left of its budget.
    pub async fn project_gauges(&self) -> SchedulerResult<Vec<mission_scheduler::ProjectGauge>> {
        match self.call(Call::ProjectGauges).await? {
            Outcome::ProjectGauges { gauges } => Ok(gauges),
            other => Err(unexpected(other)),
        }
    }

    /// What a project's jobs hold and have queued, per station where they have either.
    pub async fn project_usage(&self, project_id: Uuid) -> SchedulerResult<Vec<(Uuid, mission_api::ResourcesInUse)>> {
        match self.call(Call::ProjectUsage { project_id }).await? {
            Outcome::ProjectUsage { usage } => Ok(usage),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a pilot whose allocation ended; its unfinished jobs go back in the queue.
    pub async fn remove_pilot(&self, station_id: Uuid, lz_id: Uuid) -> SchedulerResult<bool> {
        match self.call(Call::RemovePilot { station_id, lz_id }).await? {
            Outcome::Removed { removed } => Ok(removed),
            other => Err(unexpected(other)),
        }
    }

    /// Removes a landing zone of a station (or, with `lz_id` `None`, the station with all of them)
    /// from the store and from placement; a 409 while jobs that have not ended are queued for it
    /// or placed on it. Answers false when there was nothing to remove.
    pub async fn remove(&self, station_id: Uuid, lz_id: Option<Uuid>) -> SchedulerResult<bool> {
        match self.call(Call::Remove { station_id, lz_id, audit: audit::take() }).await? {
            Outcome::Removed { removed } => Ok(removed),
            other => Err(unexpected(other)),
        }
    }
}

/// A call answered with an outcome of another call: a bug, answered as a 500.
fn unexpected(outcome: Outcome) -> SchedulerError {
    SchedulerError::Store(format!("the scheduler answered {outcome:?}"))
}
