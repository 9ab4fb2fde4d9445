//! The scheduler's task: it owns the queues and what every landing zone holds, and places jobs.
//!
//! Every [`Call`] goes through this task as an event, so the placement state never races with
//! itself: submissions, stops, agent connections, heartbeats, the agents' reports, and landing
//! zones being registered or removed. A placement pass runs
//! after events that could let a job start (a submission, a job ending, an LZ connecting); there
//! is no tick. The only timers are the earliest lease deadline, after which a silent LZ loses its
//! jobs, and the end of the earliest retry backoff.
//!
//! Retries: a placed job whose attempt fails in a way its retry policy names goes back in line at
//! its old place instead of ending, as its next attempt (with more memory after running out of
//! it), held back for the policy's backoff. Backoffs are kept in memory only: after a restart a
//! held job may start at once.
//!
//! Events are taken in batches: whatever has arrived while the last batch was being written is
//! handled in memory, then one placement pass runs, then every job written by the batch goes to the
//! store in one transaction; only after that are orders sent and callers answered. Under load this
//! turns many small transactions into few, and a quiet system still handles each event at once.
//!
//! Order: FIFO per station with backfill. A job that does not fit yet reserves the connected LZ
//! best able to hold it; later jobs may still start on the station's other LZs, never on a reserved
//! one, so small jobs fill idle room without starving a large one.
//! Jobs that wait for others (`after_ok`, `after_any`: see `queue.rs`) or whose user is at
//! the per-user limit are passed over and reserve nothing. The pass also brings each queued job's
//! pending reason up to date, writing only the reasons that changed; past the point where every
//! connected LZ is reserved it only says so (`priority`), without searching the LZs for each job.
//!
//! The store is the source of truth: every move is written before the agent or the caller hears
//! of it, [`State::rebuilt`] rebuilds queues and occupancy from the unfinished jobs after a
//! restart (or when another replica takes over as leader), and should a write fail the jobs are
//! reloaded from the store the same way. A write refused because this replica no longer leads
//! ends the task.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use mission_api::lz::{Assignment, Hello, InputFile, LogOffsets, Order, Report, Welcome};
use mission_api::{Job, JobStatus, PendingKind, PendingReason, Resources, RetryOn, RetryPolicy};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::queue::{Dependencies, Queue, Settled};
use super::{Call, Event, Outcome, Policy, Responder, SchedulerError, SchedulerResult, SessionId, Sessions};
use crate::agent_tokens::AgentTokens;
use crate::job_logs::{JobLogs, LogStream};
use crate::store::{self, JobUpdate, LzIdentity, Store, StoreError};

/// Most events handled in one batch, so a flood of them still gets answers in steady steps.
const MAX_BATCH: usize = 256;

/// A job an LZ holds.
struct Placed {
    job: Job,
    seq: u64,
    stop_requested: bool,
}

/// An agent's order stream; dropping it ends the stream (the agent then connects again).
struct Connection {
    id: SessionId,
    sessions: Arc<Sessions>,
}

impl Connection {
    fn send(&self, order: Order) {
        self.sessions.deliver(self.id, order);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.sessions.end(self.id);
    }
}

struct LzState {
    station_id: Uuid,
    name: String,
    /// What the agent advertised when it last connected; `None` until it first did.
    capacity: Option<Resources>,
    gpus: Vec<u32>,
    free_cpu: i64,
    free_memory: i64,
    free_gpus: BTreeSet<u32>,
    connection: Option<Connection>,
    /// When the lease runs out; `None` once it did (until the agent connects again).
    lease_until: Option<Instant>,
    jobs: HashMap<Uuid, Placed>,
    /// A gateway into a batch system takes this many jobs at once, each within `capacity`,
    /// whatever else it holds (its batch system queues them).
    max_jobs: Option<u32>,
}

impl LzState {
    /// An LZ offering `capacity` (unknown until its agent first connects) with the GPUs `gpus`.
    fn new(station_id: Uuid, name: String, capacity: Option<Resources>, gpus: Vec<u32>) -> Self {
        Self {
            station_id,
            name,
            capacity,
            free_cpu: capacity.map_or(0, |c| i64::from(c.cpu_count)),
            free_memory: capacity.map_or(0, |c| c.memory_amount as i64),
            free_gpus: gpus.iter().copied().collect(),
            gpus,
            connection: None,
            lease_until: None,
            jobs: HashMap::new(),
            max_jobs: None,
        }
    }

    fn fits_now(&self, job: &Job) -> bool {
        if let Some(max) = self.max_jobs {
            return self.jobs.len() < max as usize && self.could_hold(job);
        }
        self.free_cpu >= i64::from(job.cpu_count)
            && self.free_memory >= job.memory_amount as i64
            && self.free_gpus.len() >= job.gpu_count as usize
    }

    fn could_hold(&self, job: &Job) -> bool {
        self.capacity.is_some_and(|c| {
            c.cpu_count >= job.cpu_count && c.memory_amount >= job.memory_amount && c.gpu_count >= job.gpu_count
        })
    }

    /// Counts a placed job (with its `gpu_indices`) against the free resources.
    fn hold(&mut self, placed: Placed) {
        if self.max_jobs.is_some() {
            self.jobs.insert(placed.job.job_id, placed);
            return;
        }
        self.free_cpu -= i64::from(placed.job.cpu_count);
        self.free_memory -= placed.job.memory_amount as i64;
        for g in &placed.job.gpu_indices {
            self.free_gpus.remove(g);
        }
        self.jobs.insert(placed.job.job_id, placed);
    }

    fn release(&mut self, job_id: Uuid) -> Option<Placed> {
        let placed = self.jobs.remove(&job_id)?;
        if self.max_jobs.is_some() {
            return Some(placed);
        }
        self.free_cpu += i64::from(placed.job.cpu_count);
        self.free_memory += placed.job.memory_amount as i64;
        self.free_gpus.extend(placed.job.gpu_indices.iter().filter(|g| self.gpus.contains(g)));
        Some(placed)
    }
}

/// Where a new or reloaded job stands with the jobs it waits for.
enum Standing {
    /// It may be queued (it waits for those that have not ended, if any).
    Waits,
    /// One it had to wait for ended without completing: it fails, for this reason.
    Fails(String),
    /// The job of this request field is not one of its user's.
    Unknown(&'static str, Uuid),
}

/// An answer waiting for the batch's write.
struct Answer {
    reply: Responder,
    outcome: Outcome,
}

impl Answer {
    /// Answers with the batch's outcome: `failure` when its write failed.
    fn send(self, failure: Option<&SchedulerError>) {
        self.reply.send(failure.map_or(Ok(self.outcome), |e| Err(e.clone())));
    }
}

/// An order waiting for the batch's write.
enum Pending {
    /// Run a job placed on the LZ (looked up when sent).
    Run(Uuid),
    Stop(Uuid),
}

/// What one batch of events changes: written together, then made known.
#[derive(Default)]
struct Batch {
    inserts: Vec<Job>,
    updates: Vec<JobUpdate>,
    /// New pending reasons of queued jobs.
    pending: Vec<(Uuid, PendingReason)>,
    orders: Vec<(Uuid, Pending)>,
    answers: Vec<Answer>,
    place: bool,
    /// How many of `updates` have had their bearing on dependent jobs settled.
    settled: usize,
}

impl Batch {
    fn is_empty(&self) -> bool {
        self.inserts.is_empty()
            && self.updates.is_empty()
            && self.pending.is_empty()
            && self.orders.is_empty()
            && self.answers.is_empty()
    }

    /// The status a job ended in by this batch, if it did.
    fn ended(&self, job_id: Uuid) -> Option<JobStatus> {
        let updated = self.updates.iter().rev().find(|u| u.job_id == job_id).map(|u| u.status);
        updated.or_else(|| self.inserts.iter().find(|j| j.job_id == job_id).map(|j| j.status)).filter(|s| s.is_final())
    }
}

pub(crate) struct State {
    store: Store,
    logs: Arc<JobLogs>,
    tokens: Arc<AgentTokens>,
    lease: Duration,
    max_running_per_user: Option<u32>,
    lzs: HashMap<Uuid, LzState>,
    queue: Queue,
    /// What queued jobs wait for besides room.
    dependencies: Dependencies,
    /// Queued retries held back until their backoff ends.
    backoffs: HashMap<Uuid, Instant>,
    next_seq: u64,
    sessions: Arc<Sessions>,
    batch: Batch,
}

/// Why the task stopped taking events.
enum Stop {
    /// Another replica leads now.
    Deposed,
}

impl State {
    /// The state rebuilt from the store: the landing zones, the queue, what each LZ holds.
    pub(crate) async fn rebuilt(
        store: Store,
        logs: Arc<JobLogs>,
        tokens: Arc<AgentTokens>,
        policy: Policy,
        sessions: Arc<Sessions>,
    ) -> Result<Self, StoreError> {
        let mut state = State {
            store,
            logs,
            tokens,
            lease: policy.lease,
            max_running_per_user: policy.max_running_per_user,
            lzs: HashMap::new(),
            queue: Queue::default(),
            dependencies: Dependencies::default(),
            backoffs: HashMap::new(),
            next_seq: 0,
            sessions,
            batch: Batch::default(),
        };
        state.rebuild().await?;
        Ok(state)
    }

    async fn rebuild(&mut self) -> Result<(), StoreError> {
        for lz in self.store.landing_zones(None, self.lease, store::now()).await? {
            let gpus = (0..lz.resources.map_or(0, |r| r.gpu_count)).collect();
            self.lzs.insert(lz.lz_id, LzState::new(lz.station_id, lz.name, lz.resources, gpus));
        }
        self.load_jobs().await?;
        self.settle_dependencies();
        let batch = std::mem::take(&mut self.batch);
        self.store.save_jobs(&batch.inserts, &batch.updates, &batch.pending).await
    }

    /// Fills the queue and the LZs' occupancy from the store's unfinished jobs; jobs placed on an
    /// LZ that is gone are lost (in the batch).
    async fn load_jobs(&mut self) -> Result<(), StoreError> {
        let mut waiting = Vec::new();
        for job in self.store.unfinished_jobs().await? {
            let seq = self.bump();
            if job.status == JobStatus::Queued {
                if !job.after_ok.is_empty() || !job.after_any.is_empty() {
                    waiting.push(job.job_id);
                }
                self.queue.insert(seq, job);
                continue;
            }
            let placed = Placed { job, seq, stop_requested: false };
            match placed.job.lz_id.and_then(|id| self.lzs.get_mut(&id)) {
                Some(lz) => lz.hold(placed),
                None => self.lose(placed, "its landing zone was removed"),
            }
        }
        for job_id in waiting {
            let job = self.queue.get(job_id).expect("queued above");
            let (after_ok, after_any) = (job.after_ok.clone(), job.after_any.clone());
            match self.wait_for(job_id, job.user_id, &after_ok, &after_any).await? {
                Standing::Waits => {}
                Standing::Fails(why) => self.fail_waiting(job_id, why),
                Standing::Unknown(_, dep) => {
                    self.fail_waiting(job_id, format!("the job it waited for, {dep}, no longer exists"));
                }
            }
        }
        // Agents that had no server to report to (a restart) get a lease from now.
        let grace = Instant::now() + self.lease;
        for lz in self.lzs.values_mut().filter(|lz| !lz.jobs.is_empty() && lz.lease_until.is_none()) {
            lz.lease_until = Some(grace);
        }
        self.batch.place = true;
        Ok(())
    }

    /// After a failed write: forget what the batch did and take the jobs from the store again.
    /// Connections and leases stay; stop requests not yet carried out are lost (the caller got an
    /// error and may ask again).
    async fn reload_jobs(&mut self) {
        self.queue.clear();
        self.dependencies.clear();
        for lz in self.lzs.values_mut() {
            let ids: Vec<Uuid> = lz.jobs.keys().copied().collect();
            for id in ids {
                lz.release(id);
            }
        }
        if let Err(e) = self.load_jobs().await {
            tracing::error!("reloading jobs after a failed write: {e}");
        }
    }

    fn bump(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// A move ending a job, in the batch.
    fn end(&mut self, job_id: Uuid, status: JobStatus, reason: String) {
        let mut update = JobUpdate::new(job_id, status);
        update.detail = Some(reason.clone());
        update.reason = Some(reason);
        self.batch.updates.push(update);
    }

    /// Puts a placed job back in line at its original place, in the batch.
    fn requeue(&mut self, placed: Placed, why: &str) {
        let mut update = JobUpdate::new(placed.job.job_id, JobStatus::Queued);
        update.detail = Some(why.to_owned());
        self.back_in_line(placed, update);
    }

    /// Moves a job that left its LZ back into the queue at its original place with `update` (a
    /// move to `queued`, which this completes), in the batch.
    fn back_in_line(&mut self, mut placed: Placed, mut update: JobUpdate) {
        update.lz_id = Some(None);
        update.gpu_indices = Some(Vec::new());
        self.batch.updates.push(update);
        placed.job.status = JobStatus::Queued;
        placed.job.lz_id = None;
        placed.job.gpu_indices.clear();
        placed.job.pending_reason = None;
        self.queue.insert(placed.seq, placed.job);
        self.batch.place = true;
    }

    /// Ends a job whose LZ was lost while it held it, or tries it again if its policy says so.
    fn lose(&mut self, placed: Placed, why: &str) {
        match retried(&placed.job, RetryOn::Lost) {
            Some(policy) => self.retry(placed, &policy, RetryOn::Lost, why),
            None => self.end(placed.job.job_id, JobStatus::Lost, why.into()),
        }
    }

    /// Puts a job whose attempt failed so (`why` in words), and which has left its LZ, back in
    /// line as its next attempt under `policy` ([`retried`]). After running out of memory the
    /// next attempt asks for more, up to the policy's cap and what the largest landing zone it
    /// may run on offers.
    fn retry(&mut self, mut placed: Placed, policy: &RetryPolicy, failure: RetryOn, why: &str) {
        let job = &mut placed.job;
        let next = job.attempt + 1;
        let mut update = JobUpdate::new(job.job_id, JobStatus::Queued);
        let mut detail = format!("attempt {} of {} failed ({why}); attempt {next}", job.attempt, policy.max_attempts);
        if failure == RetryOn::OutOfMemory {
            let offered = self
                .lzs
                .iter()
                .filter(|(id, lz)| lz.station_id == job.station_id && job.requested_lz_id.is_none_or(|r| r == **id))
                .filter_map(|(_, lz)| lz.capacity.map(|c| c.memory_amount))
                .max()
                .unwrap_or(u64::MAX);
            let cap = policy.max_memory.unwrap_or(u64::MAX).min(offered);
            let more = (job.memory_amount as f64 * policy.memory_factor).ceil() as u64;
            let memory = more.min(cap).max(job.memory_amount);
            if memory != job.memory_amount {
                detail.push_str(&format!(" asks for {memory} MB of memory"));
                job.memory_amount = memory;
                update.memory_amount = Some(memory);
            }
        }
        let delay = policy.delay_before(next);
        if !delay.is_zero() {
            detail.push_str(&format!(", after {} s", delay.as_secs()));
            self.backoffs.insert(job.job_id, Instant::now() + delay);
        }
        job.attempt = next;
        job.reason = None;
        job.exit_code = None;
        update.attempt = Some(next);
        update.detail = Some(detail);
        self.back_in_line(placed, update);
    }

    /// Takes events until their senders are gone, the server shuts down or another replica
    /// leads.
    pub(crate) async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: CancellationToken) {
        loop {
            let leases = self.lzs.values().filter_map(|lz| lz.lease_until);
            let deadline = leases.chain(self.backoffs.values().copied()).min();
            tokio::select! {
                event = events.recv() => match event {
                    Some(event) => {
                        self.handle(event).await;
                        for _ in 1..MAX_BATCH {
                            let Ok(event) = events.try_recv() else { break };
                            self.handle(event).await;
                        }
                    }
                    None => return,
                },
                () = sleep_until(deadline) => {
                    self.expire_leases();
                    self.batch.place = true;
                }
                () = shutdown.cancelled() => return,
            }
            self.settle_dependencies();
            if std::mem::take(&mut self.batch.place) {
                self.place();
            }
            if let Err(Stop::Deposed) = self.flush().await {
                tracing::warn!("another replica leads the scheduler now; this one stops placing jobs");
                return;
            }
        }
    }

    /// Writes the batch, then sends its orders, wakes the log followers of jobs that ended and
    /// answers its callers; on a failed write, answers with the error and reloads the jobs.
    async fn flush(&mut self) -> Result<(), Stop> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        // The reads for the assignments go through the read pool, beside the write.
        let (runs, saved) = tokio::join!(
            self.assignments(&batch.orders),
            self.store.save_jobs(&batch.inserts, &batch.updates, &batch.pending)
        );
        let mut runs = match saved.and(runs) {
            Ok(runs) => runs,
            Err(StoreError::NotLeader) => {
                let failure = SchedulerError::Unavailable("the scheduler's leader changed; try again".into());
                for answer in batch.answers {
                    answer.send(Some(&failure));
                }
                return Err(Stop::Deposed);
            }
            Err(e) => {
                tracing::error!("writing jobs: {e}");
                let failure = SchedulerError::from(e);
                for answer in batch.answers {
                    answer.send(Some(&failure));
                }
                self.reload_jobs().await;
                return Ok(());
            }
        };
        for update in batch.updates.iter().filter(|u| u.status.is_final()) {
            self.logs.finish(update.job_id);
            self.sessions.broadcast_job_ended(update.job_id);
        }
        for (lz_id, order) in batch.orders {
            let order = match order {
                Pending::Run(job_id) => match runs.remove(&job_id) {
                    Some(assignment) => Order::Run(assignment),
                    None => continue,
                },
                Pending::Stop(job_id) => Order::Stop { job_id },
            };
            if let Some(connection) = self.lzs.get(&lz_id).and_then(|lz| lz.connection.as_ref()) {
                connection.send(order);
            }
        }
        for answer in batch.answers {
            answer.send(None);
        }
        Ok(())
    }

    /// The assignments of the batch's run orders (the mission's files read once per mission).
    async fn assignments(&self, orders: &[(Uuid, Pending)]) -> Result<HashMap<Uuid, Assignment>, StoreError> {
        let mut files: HashMap<Uuid, Vec<InputFile>> = HashMap::new();
        // Per (user, station): the user's name, and whether they operate the station.
        let mut operators: HashMap<(Uuid, Uuid), (String, bool)> = HashMap::new();
        let mut runs = HashMap::new();
        for (lz_id, order) in orders {
            let Pending::Run(job_id) = order else { continue };
            let Some(lz) = self.lzs.get(lz_id) else { continue };
            let Some(placed) = lz.jobs.get(job_id) else { continue };
            let job = &placed.job;
            let operator = (job.user_id, lz.station_id);
            if let std::collections::hash_map::Entry::Vacant(entry) = operators.entry(operator) {
                let user = self.store.user_by_id(job.user_id).await?;
                let admin = user.as_ref().is_some_and(|u| u.admin);
                let owner =
                    admin || self.store.station(lz.station_id).await?.is_some_and(|s| s.owner_id == Some(job.user_id));
                entry.insert((user.map(|u| u.username).unwrap_or_default(), owner));
            }
            if let std::collections::hash_map::Entry::Vacant(entry) = files.entry(job.mission_id) {
                let listed = self.store.mission_files(job.mission_id).await?;
                entry.insert(
                    listed.into_iter().map(|f| InputFile { path: f.path, size: f.size, sha256: f.sha256 }).collect(),
                );
            }
            // A retry's output goes on from where the earlier attempts' ended.
            let mut log_offsets = LogOffsets::default();
            if job.attempt > 1 {
                for (stream, offset) in
                    [(LogStream::Stdout, &mut log_offsets.stdout), (LogStream::Stderr, &mut log_offsets.stderr)]
                {
                    // Should the log not be readable, the attempt's output counts from its start
                    // (and what is already there hides as much of it).
                    match self.logs.received(job.mission_id, *job_id, stream).await {
                        Ok(received) => *offset = received,
                        Err(e) => tracing::warn!(%job_id, "reading the size of the job's {}: {e}", stream.name()),
                    }
                }
            }
            runs.insert(
                *job_id,
                Assignment {
                    job_id: *job_id,
                    mission_id: job.mission_id,
                    user_id: job.user_id,
                    username: operators[&operator].0.clone(),
                    user_is_operator: operators[&operator].1,
                    command: job.command.clone(),
                    cpu_count: job.cpu_count,
                    memory_amount: job.memory_amount,
                    gpu_count: job.gpu_count,
                    gpu_indices: job.gpu_indices.clone(),
                    time_limit: job.time_limit,
                    files: files[&job.mission_id].clone(),
                    attempt: job.attempt,
                    log_offsets,
                    array_index: job.array_index,
                },
            );
        }
        Ok(runs)
    }

    async fn handle(&mut self, event: Event) {
        let Event { call, reply } = event;
        // Calls answered after the batch is written carry their outcome into it; the others are
        // answered at once.
        let settled = match call {
            Call::Submit { job } => self.submit(*job).await.map(|job| Outcome::Job { job: Box::new(job) }),
            // Alike but for what no check looks at, they are all accepted or, by the first, all
            // refused.
            Call::SubmitMany { jobs } => {
                async {
                    for job in jobs {
                        self.submit(job).await?;
                    }
                    Ok(Outcome::Done)
                }
                .await
            }
            Call::Stop { job_id, by } => self.stop(job_id, by).map(|()| Outcome::Done),
            Call::Connect { lz, hello, session } => {
                self.connect(lz, *hello, session).await.map(|welcome| Outcome::Welcome { welcome: Box::new(welcome) })
            }
            Call::Reports { lz, reports } => self.reports(lz, reports).map(|()| Outcome::Done),
            Call::Disconnected { lz_id, session } => {
                if let Some(lz) = self.lzs.get_mut(&lz_id)
                    && lz.connection.as_ref().is_some_and(|c| c.id == session)
                {
                    lz.connection = None;
                }
                return reply.send(Ok(Outcome::Done));
            }
            Call::Heartbeat { lz_id } => {
                let result = match self.lzs.get_mut(&lz_id) {
                    Some(lz) if lz.connection.is_some() => {
                        lz.lease_until = Some(Instant::now() + self.lease);
                        self.store.lz_seen(lz_id, store::now()).await.map_err(SchedulerError::from)
                    }
                    _ => Err(SchedulerError::Conflict("this landing zone is not connected; connect again".into())),
                };
                return reply.send(result.map(|()| Outcome::Done));
            }
            Call::Registered { lz } => {
                self.lzs.entry(lz.lz_id).or_insert_with(|| LzState::new(lz.station_id, lz.name, None, Vec::new()));
                self.forget_tokens();
                return reply.send(Ok(Outcome::Done));
            }
            Call::Demand { lz_id } => return reply.send(Ok(Outcome::Demand { demand: self.demand(lz_id) })),
            Call::RemovePilot { station_id, lz_id } => {
                let removed = self.remove_pilot(station_id, lz_id).await;
                return reply.send(removed.map(|removed| Outcome::Removed { removed }));
            }
            Call::Remove { station_id, lz_id } => {
                let removed = self.remove(station_id, lz_id).await;
                return reply.send(removed.map(|removed| Outcome::Removed { removed }));
            }
        };
        match settled {
            Ok(outcome) => self.batch.answers.push(Answer { reply, outcome }),
            Err(e) => reply.send(Err(e)),
        }
    }

    /// Drops the agent-token caches of every replica (after LZs were removed or re-keyed).
    fn forget_tokens(&self) {
        self.tokens.forget();
        self.sessions.broadcast_forget_tokens();
    }

    async fn submit(&mut self, mut job: Job) -> SchedulerResult<Job> {
        let candidates: Vec<&LzState> = match job.requested_lz_id {
            Some(id) => self.lzs.get(&id).filter(|lz| lz.station_id == job.station_id).into_iter().collect(),
            None => self.lzs.values().filter(|lz| lz.station_id == job.station_id).collect(),
        };
        if let (Some(lz_id), true) = (job.requested_lz_id, candidates.is_empty()) {
            return Err(SchedulerError::invalid_field("lz_id", format!("the station has no landing zone {lz_id}")));
        }
        if candidates.is_empty() {
            return Err(SchedulerError::invalid_field("station_id", "the station has no landing zones to run jobs on"));
        }
        // An LZ that never connected may be any size: only known sizes can rule a job out.
        let unknown = candidates.iter().any(|lz| lz.capacity.is_none());
        if !unknown && !candidates.iter().any(|lz| lz.could_hold(&job)) {
            let largest = candidates
                .iter()
                .filter_map(|lz| lz.capacity.map(|r| (lz, r)))
                .max_by_key(|(lz, r)| (r.gpu_count, r.cpu_count, r.memory_amount, lz.name.clone()))
                .map(|(lz, r)| {
                    format!(
                        "{} offers cpu_count {}, memory_amount {} MB, gpu_count {}",
                        lz.name, r.cpu_count, r.memory_amount, r.gpu_count
                    )
                })
                .unwrap_or_default();
            let whom =
                if job.requested_lz_id.is_some() { "the landing zone" } else { "no landing zone of the station" };
            return Err(SchedulerError::Invalid {
                field: None,
                detail: format!(
                    "{whom} could ever hold this job (cpu_count {}, memory_amount {} MB, gpu_count {}): {largest}",
                    job.cpu_count, job.memory_amount, job.gpu_count
                ),
            });
        }
        let standing = self.wait_for(job.job_id, job.user_id, &job.after_ok, &job.after_any).await?;
        if let Standing::Unknown(field, dep) = standing {
            return Err(SchedulerError::invalid_field(field, format!("you have no job {dep}")));
        }
        if let Standing::Fails(why) = standing {
            // Never to run: it ends as it is written, without a trip through the queue.
            let now = store::now();
            job.status = JobStatus::Failed;
            job.reason = Some(why.clone());
            job.finished_at = Some(now);
            job.history.push(mission_api::JobTransition { status: JobStatus::Failed, at: now, detail: Some(why) });
            self.batch.inserts.push(job.clone());
            return Ok(job);
        }
        let seq = self.bump();
        self.queue.insert(seq, job.clone());
        self.batch.inserts.push(job.clone());
        self.batch.place = true;
        Ok(job)
    }

    /// Records what a queued job waits for: of `after_ok` and `after_any`, the jobs that have
    /// not ended. Records nothing when one of them ended without completing or is not a job of
    /// `user_id`'s.
    async fn wait_for(
        &mut self,
        job_id: Uuid,
        user_id: Uuid,
        after_ok: &[Uuid],
        after_any: &[Uuid],
    ) -> Result<Standing, StoreError> {
        let mut unfinished: HashMap<Uuid, Uuid> = HashMap::new();
        let mut ended: HashMap<Uuid, JobStatus> = HashMap::new();
        let mut unknown = Vec::new();
        for &dep in after_ok.iter().chain(after_any) {
            let held = self.lzs.values().find_map(|lz| lz.jobs.get(&dep)).map(|p| &p.job);
            if let Some(job) = self.queue.get(dep).or(held) {
                unfinished.insert(dep, job.user_id);
            } else if let Some(status) = self.batch.ended(dep) {
                ended.insert(dep, status);
            } else {
                unknown.push(dep);
            }
        }
        // Jobs the scheduler does not hold have ended, or never were (or are someone else's).
        let stored = self.store.job_owners_and_statuses(&unknown).await?;
        for (dep, owner, status) in stored {
            if owner == user_id && status.is_final() {
                ended.insert(dep, status);
            }
        }
        for (field, deps) in [("after_ok", after_ok), ("after_any", after_any)] {
            let mine = |dep: &Uuid| unfinished.get(dep) == Some(&user_id) || ended.contains_key(dep);
            if let Some(dep) = deps.iter().find(|dep| !mine(dep)) {
                return Ok(Standing::Unknown(field, *dep));
            }
        }
        if let Some((dep, status)) =
            after_ok.iter().find_map(|dep| ended.get(dep).filter(|s| **s != JobStatus::Completed).map(|s| (dep, s)))
        {
            return Ok(Standing::Fails(format!("the job it waited for, {dep}, ended {status}")));
        }
        let open = |deps: &[Uuid]| deps.iter().filter(|d| unfinished.contains_key(d)).copied().collect();
        self.dependencies.wait(job_id, open(after_ok), open(after_any));
        Ok(Standing::Waits)
    }

    /// Ends a queued job that waited for another which did not complete.
    fn fail_waiting(&mut self, job_id: Uuid, why: String) {
        if self.queue.remove(job_id).is_some() {
            self.end(job_id, JobStatus::Failed, why);
        }
    }

    /// Settles, for every job the batch has ended so far (and those that ending them ends in
    /// turn), the jobs that waited for it: they may be placed now, or they fail.
    fn settle_dependencies(&mut self) {
        while self.batch.settled < self.batch.updates.len() {
            let update = &self.batch.updates[self.batch.settled];
            self.batch.settled += 1;
            if !update.status.is_final() {
                continue;
            }
            for settled in self.dependencies.ended(update.job_id, update.status) {
                match settled {
                    Settled::Free => self.batch.place = true,
                    Settled::Failed(job_id, why) => self.fail_waiting(job_id, why),
                }
            }
        }
    }

    fn stop(&mut self, job_id: Uuid, by: String) -> SchedulerResult<()> {
        if self.queue.remove(job_id).is_some() {
            self.end(job_id, JobStatus::Stopped, format!("stopped by {by} while queued"));
            return Ok(());
        }
        let Some((&lz_id, lz)) = self.lzs.iter_mut().find(|(_, lz)| lz.jobs.contains_key(&job_id)) else {
            return Err(SchedulerError::Conflict("the job has ended already".into()));
        };
        lz.jobs.get_mut(&job_id).expect("found above").stop_requested = true;
        if lz.connection.is_some() {
            self.batch.orders.push((lz_id, Pending::Stop(job_id)));
            return Ok(());
        }
        // The LZ is not connected: the job ends now; should the agent come back still running
        // it, its welcome tells it to drop the job.
        lz.release(job_id);
        self.end(job_id, JobStatus::Stopped, format!("stopped by {by}"));
        self.batch.place = true;
        Ok(())
    }

    async fn connect(&mut self, who: LzIdentity, hello: Hello, session: SessionId) -> SchedulerResult<Welcome> {
        if let Some(why) = account_mismatch(who.cluster_account.as_deref(), hello.cluster_account.as_deref()) {
            return Err(SchedulerError::Refused(why));
        }
        self.store.lz_connected(who.lz_id, hello.resources, store::now()).await?;
        let mut gpus: Vec<u32> = hello.gpus.iter().map(|g| g.index).collect();
        if gpus.len() != hello.resources.gpu_count as usize {
            gpus = (0..hello.resources.gpu_count).collect();
        }
        // New capacity, the same jobs: recount what is free.
        let held = self.lzs.remove(&who.lz_id).map(|lz| lz.jobs).unwrap_or_default();
        let mut lz = LzState::new(who.station_id, who.name.clone(), Some(hello.resources), gpus);
        lz.max_jobs = hello.max_jobs;
        for (_, placed) in held {
            lz.hold(placed);
        }
        lz.connection = Some(Connection { id: session, sessions: self.sessions.clone() });
        lz.lease_until = Some(Instant::now() + self.lease);

        let running: HashSet<Uuid> = hello.running.iter().copied().collect();
        let mut drop: Vec<Uuid> = running.iter().filter(|id| !lz.jobs.contains_key(id)).copied().collect();
        let (mut resend, mut requeue, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for (id, placed) in &lz.jobs {
            if running.contains(id) {
                if placed.stop_requested {
                    self.batch.orders.push((who.lz_id, Pending::Stop(*id)));
                }
                continue;
            }
            match placed.job.status {
                JobStatus::Assigned if !placed.stop_requested => resend.push(*id),
                JobStatus::Assigned | JobStatus::Staging if !placed.stop_requested => requeue.push(*id),
                _ if placed.stop_requested => {
                    ends.push((*id, JobStatus::Stopped, "stopped while its landing zone was away"))
                }
                _ => ends.push((*id, JobStatus::Lost, "its landing zone restarted while the job ran")),
            }
        }
        let mut requeued = Vec::new();
        for id in requeue {
            requeued.extend(lz.release(id));
        }
        let mut ended = Vec::new();
        for (id, status, why) in ends {
            ended.extend(lz.release(id).map(|placed| (placed, status, why)));
            drop.retain(|d| *d != id);
        }
        self.lzs.insert(who.lz_id, lz);
        self.end_released(ended);
        for placed in requeued {
            self.requeue(placed, "its landing zone restarted before the job started");
        }
        self.batch.orders.extend(resend.into_iter().map(|id| (who.lz_id, Pending::Run(id))));
        self.batch.place = true;
        drop.sort();
        Ok(Welcome {
            lz_id: who.lz_id,
            station_id: who.station_id,
            name: who.name,
            lease_seconds: self.lease.as_secs(),
            drop,
        })
    }

    fn reports(&mut self, who: LzIdentity, reports: Vec<Report>) -> SchedulerResult<()> {
        let Some(lz) = self.lzs.get_mut(&who.lz_id).filter(|lz| lz.connection.is_some() || lz.lease_until.is_some())
        else {
            return Err(SchedulerError::Conflict("this landing zone is not connected; connect again".into()));
        };
        lz.lease_until = Some(Instant::now() + self.lease);
        let (mut finished, mut failed_attempts) = (Vec::new(), Vec::new());
        for report in reports {
            let current = |p: &&mut Placed| report.attempt.is_none_or(|attempt| attempt == p.job.attempt);
            let Some(placed) = lz.jobs.get_mut(&report.job_id).filter(current) else {
                continue;
            };
            // Moves only go forward; a repeated or late report changes nothing, but a new reason
            // for the same step (why a job still waits in a batch system's queue) is recorded.
            let waits = report.status < JobStatus::Running;
            let shown = |job: &Job| {
                if waits { job.pending_reason.as_ref().map(|p| p.detail.clone()) } else { job.reason.clone() }
            };
            let new_reason = report.status == placed.job.status
                && !report.status.is_final()
                && report.reason.is_some()
                && report.reason != shown(&placed.job);
            if (report.status <= placed.job.status && !new_reason) || report.status == JobStatus::Queued {
                continue;
            }
            let mut status = report.status;
            if status.is_final() && placed.stop_requested && status != JobStatus::Completed {
                status = JobStatus::Stopped;
            }
            let failure = RetryOn::of(status, report.exit_code, report.reason.as_deref());
            if let Some((failure, policy)) = failure.and_then(|f| Some((f, retried(&placed.job, f)?))) {
                let why = report.reason.unwrap_or_else(|| status.to_string());
                failed_attempts.push((report.job_id, policy, failure, why));
                continue;
            }
            let mut update = JobUpdate::new(report.job_id, status);
            update.at = report.at;
            update.exit_code = report.exit_code;
            update.detail.clone_from(&report.reason);
            if waits {
                update.pending = report.reason.map(|detail| PendingReason { kind: PendingKind::BatchSystem, detail });
                placed.job.pending_reason.clone_from(&update.pending);
            } else {
                update.reason = report.reason;
            }
            update.limits = report.limits;
            // An agent's figures are taken as measured, but none may be negative.
            update.usage = report
                .usage
                .filter(|u| status.is_final() && u.wall_time >= 0.0 && u.cpu_time.is_none_or(|cpu| cpu >= 0.0));
            placed.job.status = status;
            if update.reason.is_some() || status == JobStatus::Running {
                placed.job.reason.clone_from(&update.reason);
            }
            if status.is_final() {
                finished.push(report.job_id);
            }
            self.batch.updates.push(update);
        }
        if !finished.is_empty() {
            for id in finished {
                lz.release(id);
            }
            self.batch.place = true;
        }
        let failed_attempts: Vec<_> = failed_attempts
            .into_iter()
            .filter_map(|(id, policy, failure, why)| lz.release(id).map(|placed| (placed, policy, failure, why)))
            .collect();
        for (placed, policy, failure, why) in failed_attempts {
            self.retry(placed, &policy, failure, &why);
        }
        Ok(())
    }

    /// The queued jobs of the gateway's station that name no landing zone and that a pilot (as
    /// large as the gateway offers) could hold.
    fn demand(&self, gateway: Uuid) -> mission_api::lz::Demand {
        let Some(lz) = self.lzs.get(&gateway) else { return mission_api::lz::Demand::default() };
        let wanted = self
            .queue
            .iter()
            .map(|(_, j)| j)
            .filter(|j| j.station_id == lz.station_id && j.requested_lz_id.is_none() && lz.could_hold(j));
        let (jobs, cpus) = wanted.fold((0, 0), |(n, c), j| (n + 1, c + u64::from(j.cpu_count)));
        mission_api::lz::Demand { queued_jobs: jobs, queued_cpus: cpus }
    }

    /// Removes a pilot's landing zone; the jobs it had not finished go back in the queue (its
    /// allocation ended: that is no fault of theirs).
    async fn remove_pilot(&mut self, station_id: Uuid, lz_id: Uuid) -> SchedulerResult<bool> {
        let removed = self.store.delete_landing_zone(station_id, lz_id).await?;
        if let Some(mut lz) = self.lzs.remove(&lz_id) {
            let ids: Vec<Uuid> = lz.jobs.keys().copied().collect();
            for id in ids {
                let placed = lz.release(id).expect("listed above");
                if placed.stop_requested {
                    self.end(id, JobStatus::Stopped, "stopped; its pilot ended".into());
                } else {
                    self.requeue(placed, "its pilot's allocation ended before the job did");
                }
            }
        }
        self.forget_tokens();
        Ok(removed)
    }

    async fn remove(&mut self, station_id: Uuid, lz_id: Option<Uuid>) -> SchedulerResult<bool> {
        let concerned = |lz: Option<Uuid>| lz_id.is_none() || (lz.is_some() && lz == lz_id);
        let queued =
            self.queue.iter().filter(|(_, j)| j.station_id == station_id && concerned(j.requested_lz_id)).count();
        let placed: usize = self
            .lzs
            .iter()
            .filter(|(id, lz)| lz.station_id == station_id && concerned(Some(**id)))
            .map(|(_, lz)| lz.jobs.len())
            .sum();
        if queued + placed > 0 {
            let what = if lz_id.is_some() { "landing zone" } else { "station" };
            return Err(SchedulerError::Conflict(format!(
                "the {what} has {} jobs that have not ended; stop them first",
                queued + placed
            )));
        }
        let removed = match lz_id {
            Some(lz_id) => self.store.delete_landing_zone(station_id, lz_id).await?,
            None => self.store.delete_station(station_id).await?,
        };
        // Dropping an LZ's state ends its agent's order stream; its token no longer works.
        self.lzs.retain(|id, lz| !(lz.station_id == station_id && concerned(Some(*id))));
        self.forget_tokens();
        Ok(removed)
    }

    fn expire_leases(&mut self) {
        let now = Instant::now();
        let (mut requeued, mut ends): (_, Vec<(Placed, JobStatus, &str)>) = (Vec::new(), Vec::new());
        for lz in self.lzs.values_mut() {
            if lz.lease_until.is_none_or(|t| t > now) {
                continue;
            }
            lz.lease_until = None;
            lz.connection = None;
            let ids: Vec<Uuid> = lz.jobs.keys().copied().collect();
            for id in ids {
                let placed = lz.release(id).expect("listed above");
                match placed.job.status {
                    JobStatus::Assigned | JobStatus::Staging if !placed.stop_requested => requeued.push(placed),
                    _ if placed.stop_requested => {
                        ends.push((placed, JobStatus::Stopped, "stopped; its landing zone went silent"))
                    }
                    _ => ends.push((
                        placed,
                        JobStatus::Lost,
                        "its landing zone went silent (no heartbeat within the lease)",
                    )),
                }
            }
        }
        self.end_released(ends);
        for placed in requeued {
            self.requeue(placed, "its landing zone went silent before the job started");
        }
    }

    /// Ends jobs that have left their LZs, each in the status given for the reason given; a lost
    /// one is tried again instead where its policy says so.
    fn end_released(&mut self, ends: Vec<(Placed, JobStatus, &str)>) {
        for (placed, status, why) in ends {
            match status {
                JobStatus::Lost => self.lose(placed, why),
                _ => self.end(placed.job.job_id, status, why.into()),
            }
        }
    }

    /// One placement pass over the queue (see the module docs for the order), in the batch,
    /// which also brings every queued job's pending reason up to date.
    fn place(&mut self) {
        let mut reserved: HashSet<Uuid> = HashSet::new();
        let mut chosen: Vec<Uuid> = Vec::new();
        let mut reasons: Vec<(Uuid, PendingReason)> = Vec::new();
        let connected = self.lzs.values().filter(|lz| lz.connection.is_some()).count();
        let online_stations: HashSet<Uuid> =
            self.lzs.values().filter(|lz| lz.connection.is_some()).map(|lz| lz.station_id).collect();
        let now = Instant::now();
        self.backoffs.retain(|_, until| *until > now);
        let mut placed_per_user: HashMap<Uuid, u32> = HashMap::new();
        if self.max_running_per_user.is_some() {
            for placed in self.lzs.values().flat_map(|lz| lz.jobs.values()) {
                *placed_per_user.entry(placed.job.user_id).or_default() += 1;
            }
        }
        for (seq, job) in self.queue.iter() {
            let reason = if self.backoffs.contains_key(&job.job_id) {
                let wait = job.retry.as_ref().map_or(0, |policy| policy.delay_before(job.attempt).as_secs());
                pending(PendingKind::Backoff, format!("attempt {} waits {wait} s before it starts", job.attempt))
            } else if let Some((dep, must_complete, more)) = self.dependencies.waiting_for(job.job_id) {
                let end = if must_complete { "complete" } else { "end" };
                let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
                pending(PendingKind::Dependency, format!("waiting for job {dep} to {end}{more}"))
            } else if let Some(limit) = self
                .max_running_per_user
                .filter(|limit| placed_per_user.get(&job.user_id).copied().unwrap_or(0) >= *limit)
            {
                pending(
                    PendingKind::Quota,
                    format!("its user has {limit} jobs on landing zones, the most the server allows one user at once"),
                )
            } else if reserved.len() >= connected {
                // Every connected LZ is held for an earlier job: nothing further can start, and
                // the pass only says so, without a search of the LZs for each job of a long queue.
                self.offline(job, &online_stations).unwrap_or_else(behind)
            } else {
                let usable = |(id, lz): &(&Uuid, &LzState)| {
                    lz.station_id == job.station_id
                        && lz.connection.is_some()
                        && job.requested_lz_id.is_none_or(|r| r == **id)
                };
                // Best fit: the LZ left with the fewest free CPUs, then the least memory.
                let best = self
                    .lzs
                    .iter()
                    .filter(usable)
                    .filter(|(id, lz)| !reserved.contains(*id) && lz.fits_now(job))
                    .min_by_key(|(id, lz)| (lz.free_cpu - i64::from(job.cpu_count), lz.free_memory, **id))
                    .map(|(id, _)| *id);
                if let Some(lz_id) = best {
                    let lz = self.lzs.get_mut(&lz_id).expect("chosen from the map");
                    let mut job = job.clone();
                    job.status = JobStatus::Assigned;
                    job.lz_id = Some(lz_id);
                    job.pending_reason = None;
                    if lz.max_jobs.is_none() {
                        job.gpu_indices = lz.free_gpus.iter().take(job.gpu_count as usize).copied().collect();
                    }
                    let mut update = JobUpdate::new(job.job_id, JobStatus::Assigned);
                    update.lz_id = Some(Some(lz_id));
                    update.gpu_indices = Some(job.gpu_indices.clone());
                    update.detail = Some(format!("landing zone {}", lz.name));
                    self.batch.updates.push(update);
                    self.batch.orders.push((lz_id, Pending::Run(job.job_id)));
                    chosen.push(job.job_id);
                    *placed_per_user.entry(job.user_id).or_default() += 1;
                    lz.hold(Placed { job, seq, stop_requested: false });
                    continue;
                }
                let could_hold: Vec<(&Uuid, &LzState)> =
                    self.lzs.iter().filter(usable).filter(|(_, lz)| lz.could_hold(job)).collect();
                let holder = could_hold
                    .iter()
                    .filter(|(id, _)| !reserved.contains(*id))
                    .max_by_key(|(id, lz)| (lz.free_cpu, lz.free_memory, **id))
                    .map(|(id, lz)| (**id, lz.name.clone()));
                match holder {
                    Some((lz_id, name)) => {
                        reserved.insert(lz_id);
                        let gpus = if job.gpu_count > 0 { format!(", {} GPUs", job.gpu_count) } else { String::new() };
                        pending(
                            PendingKind::Resources,
                            format!(
                                "waiting for {} CPUs, {} MB{gpus} to be free on landing zone {name}, held for it",
                                job.cpu_count, job.memory_amount
                            ),
                        )
                    }
                    None if could_hold.is_empty() => self.offline(job, &online_stations).unwrap_or_else(|| {
                        pending(
                            PendingKind::NoLandingZone,
                            format!(
                                "no landing zone online could hold it ({} CPUs, {} MB, {} GPUs)",
                                job.cpu_count, job.memory_amount, job.gpu_count
                            ),
                        )
                    }),
                    None => behind(),
                }
            };
            if job.pending_reason.as_ref() != Some(&reason) {
                reasons.push((job.job_id, reason));
            }
        }
        for job_id in chosen {
            self.queue.remove(job_id);
        }
        for (job_id, reason) in reasons {
            self.queue.get_mut(job_id).expect("still queued").pending_reason = Some(reason.clone());
            self.batch.pending.push((job_id, reason));
        }
    }

    /// Why a queued job waits when the landing zone it names, or every one of its station, is
    /// not online; `None` when one is.
    fn offline(&self, job: &Job, online_stations: &HashSet<Uuid>) -> Option<PendingReason> {
        let detail = match job.requested_lz_id {
            Some(lz_id) => match self.lzs.get(&lz_id) {
                Some(lz) if lz.connection.is_some() => return None,
                Some(lz) => format!("its landing zone {} is not online", lz.name),
                None => format!("its landing zone {lz_id} is gone"),
            },
            None if online_stations.contains(&job.station_id) => return None,
            None => "no landing zone of its station is online".to_owned(),
        };
        Some(pending(PendingKind::NoLandingZone, detail))
    }
}

/// The retry policy of a job whose current attempt failed so, if it tries the job again.
fn retried(job: &Job, failure: RetryOn) -> Option<RetryPolicy> {
    job.retry.clone().filter(|policy| policy.retries(job.attempt, failure))
}

/// A pending reason.
fn pending(kind: PendingKind, detail: String) -> PendingReason {
    PendingReason { kind, detail }
}

/// The pending reason of a job that earlier jobs come before (the store adds how many).
fn behind() -> PendingReason {
    pending(PendingKind::Priority, "first in line for the room it needs".into())
}

/// Why an agent may not connect: it is a gateway for another cluster account than the one its
/// landing zone was registered with, or a gateway of one registered without (or the reverse).
fn account_mismatch(registered: Option<&str>, agent: Option<&str>) -> Option<String> {
    Some(match (registered, agent) {
        (None, None) => return None,
        (Some(registered), Some(agent)) if registered == agent => return None,
        (None, Some(agent)) => format!(
            "this agent is a gateway submitting jobs as cluster account {agent:?}, but its landing zone was \
             registered without one: register a landing zone for it with that cluster account"
        ),
        (Some(registered), None) => format!(
            "this landing zone was registered as a gateway for cluster account {registered:?}; run its agent with \
             --runner slurm as that account"
        ),
        (Some(registered), Some(agent)) => {
            format!(
                "this landing zone was registered for cluster account {registered:?}, but its agent runs as {agent:?}"
            )
        }
    })
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
