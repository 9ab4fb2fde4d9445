//! The scheduler: one task that owns the queues and what every landing zone holds, and places jobs.
//!
//! Everything that changes a job after submission goes through this task as an event, so the
//! placement state never races with itself: submissions, stops, agent connections, heartbeats and
//! the agents' reports. A placement pass runs after each event that could let a job start (a
//! submission, a job ending, an LZ connecting); there is no tick. The only timer is the earliest
//! lease deadline, after which a silent LZ loses its jobs.
//!
//! Order: FIFO per station with backfill. A job that does not fit yet reserves the connected LZ
//! best able to hold it; later jobs may still start on the station's other LZs, never on a reserved
//! one, so small jobs fill idle room without starving a large one.
//!
//! The store is the source of truth: every move is written before the agent hears of it, and
//! [`Scheduler::start`] rebuilds queues and occupancy from the unfinished jobs after a restart.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use mission_api::lz::{Assignment, Hello, InputFile, Order, Report, Welcome};
use mission_api::{Job, JobStatus, Resources};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::job_logs::JobLogs;
use crate::store::{self, JobUpdate, LzIdentity, Store, StoreError};

/// Handle to the scheduler task; cheap to clone.
#[derive(Clone, Debug)]
pub struct Scheduler {
    events: mpsc::UnboundedSender<Event>,
}

/// The orders for one agent connection, after its [`Welcome`].
pub struct Session {
    /// What the agent is told on connecting.
    pub welcome: Welcome,
    /// Orders as the scheduler issues them; ends when a newer connection of the LZ replaces this
    /// one or the LZ's lease runs out.
    pub orders: mpsc::UnboundedReceiver<Order>,
    /// Identifies this connection in [`Scheduler::disconnected`].
    pub session_id: u64,
}

type Reply<T> = oneshot::Sender<ApiResult<T>>;

enum Event {
    Submit(Box<Job>, Reply<Job>),
    Stop(Uuid, String, Reply<()>),
    Connect(LzIdentity, Box<Hello>, Reply<Session>),
    Disconnected(Uuid, u64),
    Heartbeat(Uuid, Reply<()>),
    Reports(LzIdentity, Vec<Report>, Reply<()>),
}

impl Scheduler {
    /// Rebuilds the scheduler's state from the store and starts its task.
    pub async fn start(store: Store, logs: Arc<JobLogs>, lease: Duration) -> Result<Self, StoreError> {
        let (events, rx) = mpsc::unbounded_channel();
        let mut state =
            State { store, logs, lease, lzs: HashMap::new(), queue: BTreeMap::new(), next_seq: 0, sessions: 0 };
        state.rebuild().await?;
        tokio::spawn(state.run(rx));
        Ok(Self { events })
    }

    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Event) -> ApiResult<T> {
        let (reply, answer) = oneshot::channel();
        self.events.send(make(reply)).map_err(|_| ApiError::unavailable("the scheduler has stopped"))?;
        answer.await.map_err(|_| ApiError::unavailable("the scheduler has stopped"))?
    }

    /// Queues a job (already checked and resolved by the route) and places it if it fits; a job
    /// no LZ of its station could ever hold is refused with a 400.
    pub async fn submit(&self, job: Job) -> ApiResult<Job> {
        self.ask(|r| Event::Submit(Box::new(job), r)).await
    }

    /// Stops a job: dequeues it, or has its LZ kill it.
    pub async fn stop(&self, job_id: Uuid, by: String) -> ApiResult<()> {
        self.ask(|r| Event::Stop(job_id, by, r)).await
    }

    /// An agent connects: its resources are recorded and its orders start.
    pub async fn connect(&self, lz: LzIdentity, hello: Hello) -> ApiResult<Session> {
        self.ask(|r| Event::Connect(lz, Box::new(hello), r)).await
    }

    /// An agent's order stream ended.
    pub fn disconnected(&self, lz_id: Uuid, session_id: u64) {
        let _ = self.events.send(Event::Disconnected(lz_id, session_id));
    }

    /// An agent renews its lease; a 409 tells it to connect again.
    pub async fn heartbeat(&self, lz_id: Uuid) -> ApiResult<()> {
        self.ask(|r| Event::Heartbeat(lz_id, r)).await
    }

    /// An agent reports its jobs' moves.
    pub async fn reports(&self, lz: LzIdentity, reports: Vec<Report>) -> ApiResult<()> {
        self.ask(|r| Event::Reports(lz, reports, r)).await
    }
}

/// A job an LZ holds.
struct Placed {
    job: Job,
    seq: u64,
    stop_requested: bool,
}

struct Connection {
    id: u64,
    orders: mpsc::UnboundedSender<Order>,
}

struct LzState {
    station_id: Uuid,
    capacity: Resources,
    gpus: Vec<u32>,
    free_cpu: i64,
    free_memory: i64,
    free_gpus: BTreeSet<u32>,
    connection: Option<Connection>,
    /// When the lease runs out; `None` once it did (until the agent connects again).
    lease_until: Option<Instant>,
    jobs: HashMap<Uuid, Placed>,
}

impl LzState {
    fn new(station_id: Uuid, capacity: Resources, gpus: Vec<u32>) -> Self {
        Self {
            station_id,
            capacity,
            free_cpu: i64::from(capacity.cpu_count),
            free_memory: capacity.memory_amount as i64,
            free_gpus: gpus.iter().copied().collect(),
            gpus,
            connection: None,
            lease_until: None,
            jobs: HashMap::new(),
        }
    }

    fn fits_now(&self, job: &Job) -> bool {
        self.free_cpu >= i64::from(job.cpu_count)
            && self.free_memory >= job.memory_amount as i64
            && self.free_gpus.len() >= job.gpu_count as usize
    }

    /// Counts a placed job (with its `gpu_indices`) against the free resources.
    fn hold(&mut self, placed: Placed) {
        self.free_cpu -= i64::from(placed.job.cpu_count);
        self.free_memory -= placed.job.memory_amount as i64;
        for g in &placed.job.gpu_indices {
            self.free_gpus.remove(g);
        }
        self.jobs.insert(placed.job.job_id, placed);
    }

    fn release(&mut self, job_id: Uuid) -> Option<Placed> {
        let placed = self.jobs.remove(&job_id)?;
        self.free_cpu += i64::from(placed.job.cpu_count);
        self.free_memory += placed.job.memory_amount as i64;
        self.free_gpus.extend(placed.job.gpu_indices.iter().filter(|g| self.gpus.contains(g)));
        Some(placed)
    }

    fn send(&self, order: Order) -> bool {
        self.connection.as_ref().is_some_and(|c| c.orders.send(order).is_ok())
    }
}

fn could_hold(capacity: &Resources, job: &Job) -> bool {
    capacity.cpu_count >= job.cpu_count
        && capacity.memory_amount >= job.memory_amount
        && capacity.gpu_count >= job.gpu_count
}

struct State {
    store: Store,
    logs: Arc<JobLogs>,
    lease: Duration,
    lzs: HashMap<Uuid, LzState>,
    /// Queued jobs by submission order.
    queue: BTreeMap<u64, Job>,
    next_seq: u64,
    sessions: u64,
}

impl State {
    async fn rebuild(&mut self) -> Result<(), StoreError> {
        let now = store::now();
        for lz in self.store.landing_zones(None, self.lease, now).await? {
            if let Some(capacity) = lz.resources {
                let gpus = (0..capacity.gpu_count).collect();
                self.lzs.insert(lz.lz_id, LzState::new(lz.station_id, capacity, gpus));
            }
        }
        let grace = Instant::now() + self.lease;
        let mut orphans = Vec::new();
        for job in self.store.unfinished_jobs().await? {
            let seq = self.bump();
            if job.status == JobStatus::Queued {
                self.queue.insert(seq, job);
                continue;
            }
            match job.lz_id.and_then(|id| self.lzs.get_mut(&id)) {
                Some(lz) => {
                    // The agents had no server to report to: give each a lease from now.
                    lz.lease_until = Some(grace);
                    lz.hold(Placed { job, seq, stop_requested: false });
                }
                None => orphans.push(job),
            }
        }
        let updates: Vec<_> = orphans
            .iter()
            .map(|job| ended(job.job_id, JobStatus::Lost, "its landing zone was removed".into()))
            .collect();
        self.store.update_jobs(&updates).await
    }

    /// Writes job moves, then wakes the log followers of jobs that ended and puts `requeued`
    /// jobs back in line at their original place.
    async fn commit(&mut self, updates: &[JobUpdate], requeued: Vec<Placed>) -> Result<(), StoreError> {
        self.store.update_jobs(updates).await?;
        for update in updates.iter().filter(|u| u.status.is_final()) {
            self.logs.finish(update.job_id);
        }
        for mut placed in requeued {
            placed.job.status = JobStatus::Queued;
            placed.job.lz_id = None;
            placed.job.gpu_indices.clear();
            self.queue.insert(placed.seq, placed.job);
        }
        Ok(())
    }

    fn bump(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>) {
        loop {
            let deadline = self.lzs.values().filter_map(|lz| lz.lease_until).min();
            let event = tokio::select! {
                event = events.recv() => match event {
                    Some(event) => event,
                    None => return,
                },
                () = sleep_until(deadline) => {
                    if let Err(e) = self.expire_leases().await {
                        tracing::error!("expiring leases: {e}");
                    }
                    continue;
                }
            };
            self.handle(event).await;
        }
    }

    async fn handle(&mut self, event: Event) {
        match event {
            Event::Submit(job, reply) => {
                let result = self.submit(*job).await;
                let _ = reply.send(result);
            }
            Event::Stop(job_id, by, reply) => {
                let _ = reply.send(self.stop(job_id, by).await);
            }
            Event::Connect(lz, hello, reply) => {
                let _ = reply.send(self.connect(lz, *hello).await);
            }
            Event::Disconnected(lz_id, session_id) => {
                if let Some(lz) = self.lzs.get_mut(&lz_id)
                    && lz.connection.as_ref().is_some_and(|c| c.id == session_id)
                {
                    lz.connection = None;
                }
                return;
            }
            Event::Heartbeat(lz_id, reply) => {
                let result = match self.lzs.get_mut(&lz_id) {
                    Some(lz) if lz.connection.is_some() => {
                        lz.lease_until = Some(Instant::now() + self.lease);
                        self.store.lz_seen(lz_id, store::now()).await.map_err(ApiError::from)
                    }
                    _ => Err(ApiError::conflict("this landing zone is not connected; connect again")),
                };
                let _ = reply.send(result);
                return;
            }
            Event::Reports(lz, reports, reply) => {
                let _ = reply.send(self.reports(lz, reports).await);
            }
        }
        if let Err(e) = self.place().await {
            tracing::error!("placing jobs: {}", e.problem().detail);
        }
    }

    async fn submit(&mut self, job: Job) -> ApiResult<Job> {
        let lzs = self.store.landing_zones(Some(job.station_id), self.lease, store::now()).await?;
        let candidates: Vec<_> = lzs.iter().filter(|lz| job.requested_lz_id.is_none_or(|id| id == lz.lz_id)).collect();
        if let (Some(lz_id), true) = (job.requested_lz_id, candidates.is_empty()) {
            return Err(ApiError::invalid_field("lz_id", format!("the station has no landing zone {lz_id}")));
        }
        if candidates.is_empty() {
            return Err(ApiError::invalid_field("station_id", "the station has no landing zones to run jobs on"));
        }
        // An LZ that never connected may be any size: only known sizes can rule a job out.
        let unknown = candidates.iter().any(|lz| lz.resources.is_none());
        if !unknown && !candidates.iter().any(|lz| lz.resources.is_some_and(|r| could_hold(&r, &job))) {
            let largest = candidates
                .iter()
                .filter_map(|lz| lz.resources.map(|r| (lz, r)))
                .max_by_key(|(_, r)| (r.gpu_count, r.cpu_count, r.memory_amount))
                .map(|(lz, r)| {
                    format!(
                        "{} offers cpu_count {}, memory_amount {} MB, gpu_count {}",
                        lz.name, r.cpu_count, r.memory_amount, r.gpu_count
                    )
                })
                .unwrap_or_default();
            let whom =
                if job.requested_lz_id.is_some() { "the landing zone" } else { "no landing zone of the station" };
            return Err(ApiError::invalid(format!(
                "{whom} could ever hold this job (cpu_count {}, memory_amount {} MB, gpu_count {}): {largest}",
                job.cpu_count, job.memory_amount, job.gpu_count
            )));
        }
        self.store.insert_job(&job).await?;
        let seq = self.bump();
        self.queue.insert(seq, job.clone());
        Ok(job)
    }

    async fn stop(&mut self, job_id: Uuid, by: String) -> ApiResult<()> {
        if let Some(seq) = self.queue.iter().find(|(_, j)| j.job_id == job_id).map(|(s, _)| *s) {
            self.queue.remove(&seq);
            let stopped = ended(job_id, JobStatus::Stopped, format!("stopped by {by} while queued"));
            return Ok(self.commit(&[stopped], Vec::new()).await?);
        }
        let Some(lz) = self.lzs.values_mut().find(|lz| lz.jobs.contains_key(&job_id)) else {
            return Err(ApiError::conflict("the job has ended already"));
        };
        let placed = lz.jobs.get_mut(&job_id).expect("found above");
        placed.stop_requested = true;
        if lz.send(Order::Stop { job_id }) {
            return Ok(());
        }
        // The LZ is not connected: the job ends now; should the agent come back still running
        // it, its welcome tells it to drop the job.
        lz.release(job_id);
        Ok(self.commit(&[ended(job_id, JobStatus::Stopped, format!("stopped by {by}"))], Vec::new()).await?)
    }

    async fn connect(&mut self, who: LzIdentity, hello: Hello) -> ApiResult<Session> {
        let now = store::now();
        self.store.lz_connected(who.lz_id, hello.resources, now).await?;
        let mut gpus: Vec<u32> = hello.gpus.iter().map(|g| g.index).collect();
        if gpus.len() != hello.resources.gpu_count as usize {
            gpus = (0..hello.resources.gpu_count).collect();
        }
        self.sessions += 1;
        let session_id = self.sessions;
        let (orders, rx) = mpsc::unbounded_channel();
        let lease = self.lease;
        // New capacity, the same jobs: recount what is free.
        let held = self.lzs.remove(&who.lz_id).map(|lz| lz.jobs).unwrap_or_default();
        let lz = self.lzs.entry(who.lz_id).or_insert(LzState::new(who.station_id, hello.resources, gpus));
        for (_, placed) in held {
            lz.hold(placed);
        }
        lz.connection = Some(Connection { id: session_id, orders });
        lz.lease_until = Some(Instant::now() + lease);

        let running: HashSet<Uuid> = hello.running.iter().copied().collect();
        let mut drop: Vec<Uuid> = running.iter().filter(|id| !lz.jobs.contains_key(id)).copied().collect();
        let mut updates = Vec::new();
        let mut resend = Vec::new();
        let mut requeue = Vec::new();
        for (id, placed) in &lz.jobs {
            if running.contains(id) {
                if placed.stop_requested {
                    lz.send(Order::Stop { job_id: *id });
                }
                continue;
            }
            match placed.job.status {
                JobStatus::Assigned if !placed.stop_requested => resend.push(placed.job.clone()),
                JobStatus::Assigned | JobStatus::Staging if !placed.stop_requested => requeue.push(*id),
                _ if placed.stop_requested => {
                    updates.push(ended(*id, JobStatus::Stopped, "stopped while its landing zone was away".into()))
                }
                _ => updates.push(ended(*id, JobStatus::Lost, "its landing zone restarted while the job ran".into())),
            }
        }
        for update in &updates {
            lz.release(update.job_id);
            drop.retain(|id| *id != update.job_id);
        }
        let mut requeued = Vec::new();
        for id in requeue {
            if let Some(placed) = lz.release(id) {
                requeued.push(placed);
            }
        }
        for placed in &requeued {
            updates.push(requeue_update(placed.job.job_id, "its landing zone restarted before the job started"));
        }
        self.commit(&updates, requeued).await?;
        for job in resend {
            let order = Order::Run(self.assignment(&job).await?);
            self.lzs[&who.lz_id].send(order);
        }
        drop.sort();
        let welcome = Welcome {
            lz_id: who.lz_id,
            station_id: who.station_id,
            name: who.name.clone(),
            lease_seconds: lease.as_secs(),
            drop,
        };
        Ok(Session { welcome, orders: rx, session_id })
    }

    async fn reports(&mut self, who: LzIdentity, reports: Vec<Report>) -> ApiResult<()> {
        let Some(lz) = self.lzs.get_mut(&who.lz_id) else {
            return Err(ApiError::conflict("this landing zone is not connected; connect again"));
        };
        lz.lease_until = Some(Instant::now() + self.lease);
        let mut updates = Vec::new();
        let mut finished = Vec::new();
        for report in reports {
            let Some(placed) = lz.jobs.get_mut(&report.job_id) else { continue };
            // Moves only go forward; a repeated or late report changes nothing.
            if report.status <= placed.job.status || report.status == JobStatus::Queued {
                continue;
            }
            let mut status = report.status;
            if status.is_final() && placed.stop_requested && status != JobStatus::Completed {
                status = JobStatus::Stopped;
            }
            let mut update = JobUpdate::new(report.job_id, status);
            update.at = report.at;
            update.exit_code = report.exit_code;
            update.reason = report.reason.clone();
            update.detail = report.reason;
            update.limits = report.limits;
            placed.job.status = status;
            if status.is_final() {
                finished.push(report.job_id);
            }
            updates.push(update);
        }
        for id in finished {
            lz.release(id);
        }
        Ok(self.commit(&updates, Vec::new()).await?)
    }

    async fn expire_leases(&mut self) -> Result<(), StoreError> {
        let now = Instant::now();
        let mut updates = Vec::new();
        let mut requeued = Vec::new();
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
                    JobStatus::Assigned | JobStatus::Staging if !placed.stop_requested => {
                        updates.push(requeue_update(id, "its landing zone went silent before the job started"));
                        requeued.push(placed);
                    }
                    _ if placed.stop_requested => {
                        updates.push(ended(id, JobStatus::Stopped, "stopped; its landing zone went silent".into()))
                    }
                    _ => updates.push(ended(
                        id,
                        JobStatus::Lost,
                        "its landing zone went silent (no heartbeat within the lease)".into(),
                    )),
                }
            }
        }
        let any_requeued = !requeued.is_empty();
        self.commit(&updates, requeued).await?;
        if any_requeued && let Err(e) = self.place().await {
            tracing::error!("placing jobs: {}", e.problem().detail);
        }
        Ok(())
    }

    /// One placement pass over the queue (see the module docs for the order).
    async fn place(&mut self) -> ApiResult<()> {
        let mut reserved: HashSet<Uuid> = HashSet::new();
        let mut chosen: Vec<(u64, Uuid, Uuid)> = Vec::new(); // (seq, LZ, job)
        let connected = self.lzs.values().filter(|lz| lz.connection.is_some()).count();
        for (&seq, job) in &self.queue {
            // Once every connected LZ is held for an earlier job, nothing further can start: the
            // pass ends here instead of walking a long queue on every event.
            if reserved.len() >= connected {
                break;
            }
            let usable = |(id, lz): &(&Uuid, &LzState)| {
                lz.station_id == job.station_id
                    && lz.connection.is_some()
                    && job.requested_lz_id.is_none_or(|r| r == **id)
                    && !reserved.contains(*id)
            };
            // Best fit: the LZ left with the fewest free CPUs, then the least memory.
            let best = self
                .lzs
                .iter()
                .filter(usable)
                .filter(|(_, lz)| lz.fits_now(job))
                .min_by_key(|(id, lz)| (lz.free_cpu - i64::from(job.cpu_count), lz.free_memory, **id))
                .map(|(id, _)| *id);
            match best {
                Some(lz_id) => {
                    let lz = self.lzs.get_mut(&lz_id).expect("chosen from the map");
                    let mut job = job.clone();
                    job.status = JobStatus::Assigned;
                    job.lz_id = Some(lz_id);
                    job.gpu_indices = lz.free_gpus.iter().take(job.gpu_count as usize).copied().collect();
                    chosen.push((seq, lz_id, job.job_id));
                    lz.hold(Placed { job, seq, stop_requested: false });
                }
                None => {
                    let holder = self
                        .lzs
                        .iter()
                        .filter(usable)
                        .filter(|(_, lz)| could_hold(&lz.capacity, job))
                        .max_by_key(|(id, lz)| (lz.free_cpu, lz.free_memory, **id))
                        .map(|(id, _)| *id);
                    reserved.extend(holder);
                }
            }
        }
        if chosen.is_empty() {
            return Ok(());
        }
        let mut updates = Vec::with_capacity(chosen.len());
        for &(seq, lz_id, job_id) in &chosen {
            self.queue.remove(&seq);
            let mut update = JobUpdate::new(job_id, JobStatus::Assigned);
            update.lz_id = Some(Some(lz_id));
            update.gpu_indices = Some(self.lzs[&lz_id].jobs[&job_id].job.gpu_indices.clone());
            update.detail = Some(format!("landing zone {lz_id}"));
            updates.push(update);
        }
        self.store.update_jobs(&updates).await?;
        for (_, lz_id, job_id) in chosen {
            let order = Order::Run(self.assignment(&self.lzs[&lz_id].jobs[&job_id].job).await?);
            self.lzs[&lz_id].send(order);
        }
        Ok(())
    }

    async fn assignment(&self, job: &Job) -> ApiResult<Assignment> {
        let files = self.store.mission_files(job.mission_id).await?;
        Ok(Assignment {
            job_id: job.job_id,
            mission_id: job.mission_id,
            command: job.command.clone(),
            cpu_count: job.cpu_count,
            memory_amount: job.memory_amount,
            gpu_indices: job.gpu_indices.clone(),
            files: files.into_iter().map(|f| InputFile { path: f.path, size: f.size, sha256: f.sha256 }).collect(),
        })
    }
}

fn ended(job_id: Uuid, status: JobStatus, reason: String) -> JobUpdate {
    let mut update = JobUpdate::new(job_id, status);
    update.detail = Some(reason.clone());
    update.reason = Some(reason);
    update
}

fn requeue_update(job_id: Uuid, why: &str) -> JobUpdate {
    let mut update = JobUpdate::new(job_id, JobStatus::Queued);
    update.lz_id = Some(None);
    update.gpu_indices = Some(Vec::new());
    update.detail = Some(why.to_owned());
    update
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
