//! The scheduler's task: it owns the queues and what every landing zone holds, and places jobs.
//!
//! Every [`Call`] goes through this task as an event, so the placement state never races with
//! itself: submissions, stops, agent connections, heartbeats, the agents' reports, and landing
//! zones being registered or removed. A placement pass runs after events that could let a job
//! start (a submission, a job ending, an LZ connecting, a dependency or backoff ending), over
//! the stations where that happened only; there is no tick. The only timers are the earliest
//! lease deadline, after which a silent LZ loses its jobs, and the end of the earliest retry
//! backoff.
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
//! Order (`queue.rs`): per station, sub-queues per project and user, each first come first served,
//! the pass taking their candidates best first ([`Queue::next_candidate`]: by fair-share, or by
//! submission), with backfill. Under fair-share a job is charged as it is placed, so the pass's
//! next pick already counts it. A job that does
//! not fit yet holds the connected LZ best able to hold it (the one it held in the last pass, while
//! it still can, so that LZ goes on draining for it); later jobs may still start on the station's
//! other LZs, never on a held one, so small jobs fill idle room without starving a large one. The
//! pass ends once no LZ of the station that is not held has room left, or after [`PASS_DEPTH`]
//! jobs it could neither place nor hold an LZ for (Slurm's `default_queue_depth` plays the same
//! part): its cost follows what it places, not how many jobs wait. Jobs that wait
//! for others (`after_ok`, `after_any`) or for a backoff are out of their sub-queue until let go;
//! a sub-queue whose user is at the per-user limit is passed over whole.
//!
//! Pending reasons are written for the jobs a pass looks at (only those that changed); a job
//! no pass looked at has none stored, and readers say how many jobs are ahead of it instead.
//!
//! The store is the source of truth: every move is written before the agent or the caller hears
//! of it, [`State::rebuilt`] rebuilds queues and occupancy from the unfinished jobs after a
//! restart (or when another replica takes over as leader), streaming the queued ones, and should
//! a write fail the jobs are reloaded from the store the same way. A write refused because this
//! replica no longer leads ends the task.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mission_api::energy::Held;
use mission_api::lz::{Assignment, Hello, InputFile, LogOffsets, Order, Report, Welcome};
use mission_api::{Job, JobStatus, JobUsage, PendingKind, PendingReason, RetryOn, RetryPolicy, StationEnergy};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::budgets::{Budgets, Charge, Warning};
use super::fair_share::{EXPECTED_RUN, Usage};
use super::fleet::{Connection, Fleet, GangPart, LzState, Placed, StationLzs};
use super::limits::Limits;
use super::queue::{Dependencies, Policies, Queue, QueueKey, Queued, Settled};
use super::reclaim::{self, Plan};
use super::{
    Call, Event, Host, JobControl, Outcome, Policy, QueueOrder, Responder, SchedulerError, SchedulerResult, SessionId,
    Sessions,
};
use mission_store::audit::AuditNote;
use mission_store::{self as store, JobUpdate, LzIdentity, PlacementAsk, Spent, Store, StoreError};

/// What a placement pass asks of landing zones about a job, to answer once per kind of job:
/// its CPUs, megabytes and GPUs, whether it runs in an image, and a batch job's directory.
type Kind = (u32, u64, u32, bool, Option<Arc<str>>);

/// Most events handled in one batch, so a flood of them still gets answers in steady steps.
const MAX_BATCH: usize = 256;

/// Most jobs one pass over a station looks at that it can neither place nor hold an LZ for.
const PASS_DEPTH: usize = 256;

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
    /// New jobs with their sequence numbers.
    inserts: Vec<(u64, Job)>,
    updates: Vec<JobUpdate>,
    /// New pending reasons of queued jobs (`None` clears one).
    pending: Vec<(Uuid, Option<PendingReason>)>,
    orders: Vec<(Uuid, Pending)>,
    answers: Vec<Answer>,
    /// Projects past 80% of their budget, whose members get a `project.budget_warning` event.
    warnings: Vec<Warning>,
    /// The audit entries of the changes asked for (jobs submitted or stopped).
    audit: Vec<AuditNote>,
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
            && self.warnings.is_empty()
            && self.audit.is_empty()
    }

    /// The status a job ended in by this batch, if it did.
    fn ended(&self, job_id: Uuid) -> Option<JobStatus> {
        let updated = self.updates.iter().rev().find(|u| u.job_id == job_id).map(|u| u.status);
        updated
            .or_else(|| self.inserts.iter().find(|(_, j)| j.job_id == job_id).map(|(_, j)| j.status))
            .filter(|s| s.is_final())
    }
}

/// What placement passes have done, counted: what the scheduler's tests read to see that a
/// pass's work follows what it places, not the queue's length.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassWork {
    /// Passes over a station.
    pub passes: u64,
    /// Queued jobs looked at.
    pub examined: u64,
    /// Jobs placed.
    pub placed: u64,
}

/// The scheduler's task and all it keeps: see the module's documentation.
pub struct State {
    store: Store,
    host: Arc<dyn Host>,
    lease: Duration,
    max_running_per_user: Option<u32>,
    /// Fair-share order (else first come, first served).
    fair_share: bool,
    fleet: Fleet,
    /// Projects' limits on stations.
    limits: Limits,
    /// Projects' budgets.
    budgets: Budgets,
    /// The stations that do not reclaim borrowed room.
    no_reclaim: HashSet<Uuid>,
    /// The stations' energy settings.
    energy: HashMap<Uuid, StationEnergy>,
    /// What each project's jobs that ended since this task started drew and cost: kWh, g CO₂e,
    /// and money by currency (`/metrics`' counters).
    footprints: HashMap<Uuid, (f64, f64, BTreeMap<String, f64>)>,
    /// The queued jobs borrowed room is being reclaimed for (see `reclaim.rs`), with their
    /// station and project: until each starts, or finds nothing more to reclaim, jobs of other
    /// projects that would borrow on that station wait.
    reclaims: HashMap<Uuid, (Uuid, Uuid)>,
    /// How long a reclaimed job may take to end after `SIGTERM`, in seconds.
    reclaim_grace: u32,
    /// Shared with the routes, which read positions from it.
    queue: Arc<Mutex<Queue>>,
    policies: Policies,
    /// What queued jobs wait for besides room.
    dependencies: Dependencies,
    /// Queued retries held back until their backoff ends.
    backoffs: HashMap<Uuid, Instant>,
    /// Queued jobs their users hold ([`JobControl::Hold`]): out of placement until released,
    /// whatever else they wait for. The store keeps the hold as the job's pending reason
    /// ([`PendingKind::Held`]), which no pass rewrites since none looks at a held job.
    held: HashSet<Uuid>,
    /// When leases end, soonest first: every lease given, the stale ones (renewed since, or
    /// ended) dropped as they come to the top, so the next end is found without a walk over
    /// the fleet.
    lease_ends: BinaryHeap<Reverse<(Instant, Uuid)>>,
    /// The pending reason last written for each queued job a pass looked at.
    reasons: HashMap<Uuid, PendingReason>,
    /// The LZ each queued job held in the last pass that looked at it: the next pass holds the
    /// same one while it still can, so a held LZ goes on draining for the job that waits on it
    /// (and its pending reason, which names the LZ, is not rewritten every pass).
    holds: HashMap<Uuid, Uuid>,
    /// The ends of gangs whose rank 0 completed while other nodes still run the command (a gang
    /// launched on every node ends once all have), written once the last has.
    gang_ends: HashMap<Uuid, JobUpdate>,
    /// Stations where something happened that could let a job start, for the next pass.
    dirty: HashSet<Uuid>,
    /// The sequence number the next new job gets (the store's `seq`).
    next_seq: u64,
    sessions: Arc<Sessions>,
    batch: Batch,
    work: Arc<Mutex<PassWork>>,
}

/// Why the task stopped taking events.
enum Stop {
    /// Another replica leads now.
    Deposed,
}

impl State {
    /// The state rebuilt from the store: the landing zones, the queue, what each LZ holds. The
    /// queue is `queue` (its contents replaced by the store's), which the routes read positions
    /// from.
    pub async fn rebuilt(
        store: Store,
        host: Arc<dyn Host>,
        policy: Policy,
        sessions: Arc<Sessions>,
        queue: Arc<Mutex<Queue>>,
    ) -> Result<Self, StoreError> {
        let (fair_share, half_life) = match policy.order {
            QueueOrder::FairShare { half_life } => (true, half_life),
            // Usage is still kept (budgets read it), with the default half-life.
            QueueOrder::FirstCome => (false, QueueOrder::DEFAULT_HALF_LIFE),
        };
        let mut state = State {
            store,
            host,
            lease: policy.lease,
            max_running_per_user: policy.max_running_per_user,
            fair_share,
            fleet: Fleet::new(Usage::new(half_life, EXPECTED_RUN)),
            limits: Limits::default(),
            budgets: Budgets::default(),
            no_reclaim: HashSet::new(),
            energy: HashMap::new(),
            footprints: HashMap::new(),
            reclaims: HashMap::new(),
            reclaim_grace: u32::try_from(policy.reclaim_grace.as_secs()).unwrap_or(u32::MAX),
            queue,
            policies: Policies::default(),
            dependencies: Dependencies::default(),
            backoffs: HashMap::new(),
            held: HashSet::new(),
            lease_ends: BinaryHeap::new(),
            reasons: HashMap::new(),
            holds: HashMap::new(),
            gang_ends: HashMap::new(),
            dirty: HashSet::new(),
            next_seq: 1,
            sessions,
            batch: Batch::default(),
            work: Arc::default(),
        };
        state.rebuild().await?;
        Ok(state)
    }

    /// The counts of the passes' work, shared: they go on counting as the task runs.
    #[cfg(test)]
    pub(crate) fn work(&self) -> Arc<Mutex<PassWork>> {
        self.work.clone()
    }

    async fn rebuild(&mut self) -> Result<(), StoreError> {
        for lz in self.store.landing_zones(None, self.lease, store::now()).await? {
            let gpus = (0..lz.resources.map_or(0, |r| r.gpu_count)).collect();
            self.fleet.insert(lz.lz_id, LzState::new(lz.station_id, lz.name, lz.resources, gpus));
        }
        for record in self.store.project_limits(None).await? {
            self.limits.set(record);
        }
        let stations = self.store.stations(None).await?;
        self.no_reclaim = stations.iter().filter(|s| !s.reclaim).map(|s| s.station_id).collect();
        self.energy = stations.into_iter().map(|s| (s.station_id, s.energy)).collect();
        let now = store::now();
        for record in self.store.project_budgets(None).await? {
            let currency = record.budget.money.as_ref().map(|m| m.currency.as_str());
            let spent = self.store.project_spent(record.project_id, record.budget.period.start(now), currency).await?;
            // Where 80% was passed before the restart, the warning went out then.
            self.budgets.set(record, spent, now, true);
        }
        if self.fair_share {
            let horizon = self.fleet.usage.horizon();
            // Buckets of a thirty-second of a half-life: what each counts is off by 2% at most.
            let used = self.store.used_since(horizon, horizon / 640).await?;
            self.fleet.usage.load(used);
        }
        self.load_jobs().await?;
        self.settle_dependencies();
        let batch = std::mem::take(&mut self.batch);
        self.store.save_jobs(&batch.inserts, &batch.updates, &batch.pending).await
    }

    /// Fills the queue (streamed from the store) and the LZs' occupancy from the store's
    /// unfinished jobs; jobs placed on an LZ that is gone are lost (in the batch).
    async fn load_jobs(&mut self) -> Result<(), StoreError> {
        self.next_seq = self.store.next_job_seq().await?;
        let mut waiting = Vec::new();
        let mut held = HashSet::new();
        // Filled aside, so that readers of positions never wait for the stream.
        let mut queue = Queue::new(self.fair_share);
        {
            let policies = &mut self.policies;
            self.store
                .queued_jobs(|row| {
                    let key = QueueKey { station_id: row.station_id, project_id: row.project_id, user_id: row.user_id };
                    let waits = !row.after_ok.is_empty() || !row.after_any.is_empty() || !row.after_not_ok.is_empty();
                    if row.held {
                        held.insert(row.job_id);
                    }
                    let entry = Queued {
                        job_id: row.job_id,
                        requested_lz_id: row.requested_lz_id,
                        cpu_count: row.cpu_count,
                        memory_amount: row.memory_amount,
                        gpu_count: row.gpu_count,
                        attempt: row.attempt,
                        retry: policies.share(row.retry.as_ref()),
                        time_limit: row.time_limit,
                        ran: row.ran,
                        needs_image: row.image_id.is_some(),
                        workdir: row.workdir.map(Arc::from),
                        disk_mb: row.disk_mb,
                        nodes: row.nodes,
                        launch_first: row.launch_first,
                        requeue: row.requeue,
                    };
                    queue.insert(key, row.seq, entry, waits || row.held);
                    if waits {
                        waiting.push((row.job_id, row.user_id, [row.after_ok, row.after_any, row.after_not_ok]));
                    }
                })
                .await?;
        }
        for (station, project, share) in self.limits.shares() {
            queue.set_share(station, project, Some(share));
        }
        for ((project, user), of_member) in self.fleet.usage.members() {
            queue.set_usage(project, user, self.fleet.usage.of_project(project), of_member);
        }
        *self.queue.lock().expect("not poisoned") = queue;
        self.held = held;
        for (seq, job) in self.store.placed_jobs().await? {
            let entry = Queued::of(&job, self.policies.share(job.retry.as_ref()));
            // A gang's parts are held on each of its nodes; a node removed loses the gang.
            let nodes: Vec<Uuid> = match &job.gang {
                Some(gang) => gang.lz_ids.clone(),
                None => job.lz_id.into_iter().collect(),
            };
            let placed = Placed {
                entry,
                key: QueueKey::of(&job),
                seq,
                status: job.status,
                gpu_indices: job.gpu_indices,
                reason: job.reason,
                pending_reason: job.pending_reason,
                stop_requested: false,
                requeue_reason: None,
                part: None,
                orphan: false,
            };
            if nodes.is_empty() || nodes.iter().any(|id| self.fleet.get(id).is_none()) {
                self.lose(placed, "its landing zone was removed");
                continue;
            }
            self.budgets.hold(job.job_id, placed.key.project_id, self.budget_needs(&placed.key, &placed.entry));
            self.hold_parts(&nodes, placed);
        }
        for (job_id, user_id, [after_ok, after_any, after_not_ok]) in waiting {
            match self.wait_for(job_id, user_id, &after_ok, &after_any, &after_not_ok).await? {
                Standing::Waits if self.dependencies.waiting_for(job_id).is_none() => {
                    self.queue.lock().expect("not poisoned").let_go(job_id);
                }
                Standing::Waits => {}
                Standing::Fails(why) => self.fail_waiting(job_id, why),
                Standing::Unknown(_, dep) => {
                    self.fail_waiting(job_id, format!("the job it waited for, {dep}, no longer exists"));
                }
            }
        }
        // Agents that had no server to report to (a restart) get a lease from now.
        let grace = Instant::now() + self.lease;
        let silent: Vec<Uuid> = self
            .fleet
            .iter()
            .filter(|(_, lz)| !lz.jobs.is_empty() && lz.lease_until.is_none())
            .map(|(id, _)| *id)
            .collect();
        for lz_id in silent {
            if let Some(lz) = self.fleet.get_quiet_mut(&lz_id) {
                lz.lease_until = Some(grace);
                self.lease_ends.push(Reverse((grace, lz_id)));
            }
        }
        self.dirty.extend(self.fleet.iter().map(|(_, lz)| lz.station_id));
        Ok(())
    }

    /// After a failed write: forget what the batch did and take the jobs from the store again.
    /// Connections and leases stay; stop requests not yet carried out are lost (the caller got an
    /// error and may ask again).
    async fn reload_jobs(&mut self) {
        self.dependencies.clear();
        self.reasons.clear();
        self.holds.clear();
        self.backoffs.clear();
        let ids: Vec<Uuid> = self.fleet.iter().map(|(id, _)| *id).collect();
        for lz_id in ids {
            self.fleet.release_all(lz_id);
        }
        if let Err(e) = self.load_jobs().await {
            tracing::error!("reloading jobs after a failed write: {e}");
        }
    }

    /// A move ending a job, in the batch.
    fn end(&mut self, job_id: Uuid, status: JobStatus, reason: String) {
        let mut update = JobUpdate::new(job_id, status);
        update.detail = Some(reason.clone());
        update.reason = Some(reason);
        self.batch.updates.push(update);
    }

    /// Takes a placed job off its LZ (a gang off all of its), ordering the other nodes of a gang
    /// whose parts still run (left there as orphans) to stop them: a gang lives and ends as one.
    fn take_off(&mut self, lz_id: Uuid, job_id: Uuid) -> Option<Placed> {
        let placed = self.fleet.release(lz_id, job_id)?;
        self.gang_ends.remove(&job_id);
        let running = |node: &Uuid| self.fleet.get(node).is_some_and(|lz| lz.jobs.contains_key(&job_id));
        let stops: Vec<Uuid> = placed.other_nodes(lz_id).filter(running).collect();
        self.batch.orders.extend(stops.into_iter().map(|node| (node, Pending::Stop(job_id))));
        Some(placed)
    }

    /// Takes every job off an LZ, as [`State::take_off`] does each.
    fn take_all_off(&mut self, lz_id: Uuid) -> Vec<Placed> {
        let ids: Vec<Uuid> = self.fleet.get(&lz_id).map(|lz| lz.jobs.keys().copied().collect()).unwrap_or_default();
        ids.into_iter().filter_map(|id| self.take_off(lz_id, id)).collect()
    }

    /// Marks every part of a placed job (each node's of a gang) with `mark`, and orders each
    /// connected LZ holding one to stop it; answers the LZ that holds the job (a gang's rank 0)
    /// and whether it is connected, `None` when the job is not placed.
    fn order_stop(&mut self, job_id: Uuid, mark: impl Fn(&mut Placed)) -> Option<(Uuid, bool)> {
        let lz_id = self.fleet.holder(&job_id)?;
        let nodes: Vec<Uuid> = std::iter::once(lz_id).chain(self.fleet.placed(&job_id)?.other_nodes(lz_id)).collect();
        let mut connected = false;
        for node in nodes {
            let Some(lz) = self.fleet.get_quiet_mut(&node) else { continue };
            if let Some(part) = lz.jobs.get_mut(&job_id) {
                mark(part);
            }
            if lz.connection.is_some() {
                connected |= node == lz_id;
                self.batch.orders.push((node, Pending::Stop(job_id)));
            }
        }
        Some((lz_id, connected))
    }

    /// Takes a queued job out of line (it ends, or is placed). What a pass held for it was
    /// held for that pass only, so nothing is freed for a new one.
    fn dequeue(&mut self, job_id: Uuid) -> Option<(QueueKey, u64, Queued)> {
        let taken = self.queue.lock().expect("not poisoned").remove(job_id)?;
        self.reasons.remove(&job_id);
        self.holds.remove(&job_id);
        self.backoffs.remove(&job_id);
        self.reclaims.remove(&job_id);
        self.held.remove(&job_id);
        Some(taken)
    }

    /// Puts a placed job back in line at its original place, in the batch.
    fn requeue(&mut self, placed: Placed, why: &str) {
        let mut update = JobUpdate::new(placed.entry.job_id, JobStatus::Queued);
        update.detail = Some(why.to_owned());
        self.back_in_line(placed, update, false);
    }

    /// Puts a job stopped to go back in line (its borrowed room reclaimed, or a requeue asked
    /// for), and which has left its LZ, back in line at its original place, saying why: one that
    /// asked to be requeued ([`Queued::requeue`]) as its next attempt.
    fn requeue_stopped(&mut self, mut placed: Placed) {
        let why = placed.requeue_reason.take().unwrap_or_default();
        if placed.entry.requeue {
            return self.next_attempt(placed, &why);
        }
        self.requeue(placed, &why);
    }

    /// Puts a job that asked to be requeued ([`Queued::requeue`]), whose attempt its time limit,
    /// a reclaim or a node's failure ended (`why`), back in line at its original place as its
    /// next attempt: what it left among its results are that attempt's inputs.
    fn next_attempt(&mut self, mut placed: Placed, why: &str) {
        let next = placed.entry.attempt + 1;
        placed.entry.attempt = next;
        let mut update = JobUpdate::new(placed.entry.job_id, JobStatus::Queued);
        update.attempt = Some(next);
        update.detail = Some(format!("{why}; requeued as attempt {next}"));
        self.back_in_line(placed, update, false);
    }

    /// Moves a job that left its LZ back into the queue at its original place with `update` (a
    /// move to `queued`, which this completes), in the batch; `held` keeps it out of placement
    /// (a backoff).
    fn back_in_line(&mut self, mut placed: Placed, mut update: JobUpdate, held: bool) {
        placed.entry.ran |= placed.status >= JobStatus::Running;
        update.lz_id = Some(None);
        update.gpu_indices = Some(Vec::new());
        self.batch.updates.push(update);
        self.dirty.insert(placed.key.station_id);
        self.queue.lock().expect("not poisoned").insert(placed.key, placed.seq, placed.entry, held);
    }

    /// Ends a job whose LZ was lost while it held it, or tries it again if its policy says so.
    fn lose(&mut self, placed: Placed, why: &str) {
        if placed.entry.requeue {
            return self.next_attempt(placed, why);
        }
        match retried(&placed.entry, RetryOn::Lost) {
            Some(policy) => self.retry(placed, &policy, RetryOn::Lost, why),
            None => self.end(placed.entry.job_id, JobStatus::Lost, why.into()),
        }
    }

    /// Puts a job whose attempt failed so (`why` in words), and which has left its LZ, back in
    /// line as its next attempt under `policy` ([`retried`]). After running out of memory the
    /// next attempt asks for more, up to the policy's cap and what the largest landing zone it
    /// may run on offers.
    fn retry(&mut self, mut placed: Placed, policy: &RetryPolicy, failure: RetryOn, why: &str) {
        let job = &mut placed.entry;
        let next = job.attempt + 1;
        let mut update = JobUpdate::new(job.job_id, JobStatus::Queued);
        let mut detail = format!("attempt {} of {} failed ({why}); attempt {next}", job.attempt, policy.max_attempts);
        if failure == RetryOn::OutOfMemory {
            let offered = self
                .fleet
                .of_station(placed.key.station_id)
                .filter(|(id, _)| job.requested_lz_id.is_none_or(|r| r == *id))
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
        let held = !delay.is_zero();
        if held {
            detail.push_str(&format!(", after {} s", delay.as_secs()));
            self.backoffs.insert(job.job_id, Instant::now() + delay);
            update.pending = Some(pending(
                PendingKind::Backoff,
                format!("attempt {next} waits {} s before it starts", delay.as_secs()),
            ));
        }
        job.attempt = next;
        update.attempt = Some(next);
        update.detail = Some(detail);
        self.back_in_line(placed, update, held);
    }

    /// Takes events until their senders are gone, the server shuts down or another replica
    /// leads.
    pub async fn run(mut self, mut events: mpsc::UnboundedReceiver<Event>, shutdown: CancellationToken) {
        loop {
            let deadline = self.next_lease_end().into_iter().chain(self.backoffs.values().copied()).min();
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
                    self.end_backoffs();
                }
                () = shutdown.cancelled() => return,
            }
            self.settle_dependencies();
            self.place();
            if let Err(Stop::Deposed) = self.flush().await {
                tracing::warn!("another replica leads the scheduler now; this one stops placing jobs");
                return;
            }
        }
    }

    /// Lets the retries whose backoff has ended be placed.
    fn end_backoffs(&mut self) {
        let now = Instant::now();
        let ended: Vec<Uuid> = self.backoffs.iter().filter(|(_, until)| **until <= now).map(|(id, _)| *id).collect();
        for job_id in ended {
            self.backoffs.remove(&job_id);
            self.let_go(job_id);
        }
    }

    /// Lets a held job be placed, clearing the reason it was held for; a job its user holds
    /// stays held.
    fn let_go(&mut self, job_id: Uuid) {
        if self.held.contains(&job_id) {
            return;
        }
        let mut queue = self.queue.lock().expect("not poisoned");
        if queue.let_go(job_id) {
            let station = queue.get(job_id).map(|(key, _, _)| key.station_id);
            drop(queue);
            self.dirty.extend(station);
            self.batch.pending.push((job_id, None));
        }
    }

    /// The `project.budget_warning` events of `warnings`: one to each member of the project. A
    /// project whose members cannot be read now is warned in the log only.
    async fn warning_events(&self, warnings: &[Warning]) -> Vec<store::NewEvent> {
        let mut events = Vec::new();
        for warning in warnings {
            match self.store.project_members(warning.project_id).await {
                Ok(members) => events.extend(members.iter().map(|member| {
                    store::NewEvent::project("project.budget_warning", member.user_id, &warning.data, store::now())
                })),
                Err(e) => tracing::warn!(project = %warning.project_id, "a budget warning goes to nobody: {e}"),
            }
        }
        events
    }

    /// Writes the batch, then sends its orders, wakes the log followers of jobs that ended and
    /// answers its callers; on a failed write, answers with the error and reloads the jobs.
    async fn flush(&mut self) -> Result<(), Stop> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        let events = self.warning_events(&batch.warnings).await;
        // The reads for the assignments go through the read pool, beside the write.
        let (runs, saved) = tokio::join!(
            self.assignments(&batch.orders, &batch.inserts),
            mission_store::audit::with_notes(
                batch.audit,
                self.store.save_jobs_with_events(&batch.inserts, &batch.updates, &batch.pending, &events)
            )
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
            self.host.job_ended(update.job_id);
            self.sessions.broadcast_job_ended(update.job_id);
        }
        for (lz_id, order) in batch.orders {
            let order = match order {
                Pending::Run(job_id) => match runs.remove(&(lz_id, job_id)) {
                    Some(assignment) => Order::Run(Box::new(assignment)),
                    None => continue,
                },
                Pending::Stop(job_id) => {
                    let reclaimed = self.fleet.placed(&job_id).is_some_and(|p| p.requeue_reason.is_some());
                    Order::Stop { job_id, grace_seconds: if reclaimed { self.reclaim_grace } else { 0 } }
                }
            };
            if let Some(connection) = self.fleet.get(&lz_id).and_then(|lz| lz.connection.as_ref()) {
                connection.send(order);
            }
        }
        for answer in batch.answers {
            answer.send(None);
        }
        Ok(())
    }

    /// The assignments of the batch's run orders: each job's row (from the batch's new jobs, or
    /// the store's), its user's, station's and mission's facts (one query for the batch,
    /// [`Store::placement_facts`]), with what placement decided.
    async fn assignments(
        &self,
        orders: &[(Uuid, Pending)],
        inserts: &[(u64, Job)],
    ) -> Result<HashMap<(Uuid, Uuid), Assignment>, StoreError> {
        let runs: Vec<(Uuid, Uuid)> = orders
            .iter()
            .filter_map(|(lz_id, order)| match order {
                Pending::Run(job_id) => Some((*lz_id, *job_id)),
                Pending::Stop(_) => None,
            })
            .collect();
        if runs.is_empty() {
            return Ok(HashMap::new());
        }
        let new: HashMap<Uuid, &Job> = inserts.iter().map(|(_, job)| (job.job_id, job)).collect();
        let runs: Vec<(Uuid, &LzState, Uuid)> =
            runs.into_iter().filter_map(|(lz_id, job_id)| Some((lz_id, self.fleet.get(&lz_id)?, job_id))).collect();
        let asks: Vec<PlacementAsk> = runs
            .iter()
            .map(|(_, lz, job_id)| match new.get(job_id) {
                Some(job) => {
                    PlacementAsk::New { user_id: job.user_id, mission_id: job.mission_id, station_id: lz.station_id }
                }
                None => PlacementAsk::Stored { job_id: *job_id, station_id: lz.station_id },
            })
            .collect();
        let facts = self.store.placement_facts(&asks).await?;
        // The files of each mission, given with its first job's facts.
        let mut files: HashMap<Uuid, Vec<InputFile>> = HashMap::new();
        let mut assignments = HashMap::new();
        for ((lz_id, lz, job_id), facts) in runs.into_iter().zip(facts) {
            let Some(job) = new.get(&job_id).copied().or(facts.job.as_ref()) else { continue };
            if let Some(listed) = facts.files {
                files.insert(job.mission_id, listed);
            }
            let Some(placed) = lz.jobs.get(&job_id) else { continue };
            let (username, admin) = facts.user.unwrap_or_default();
            let (owner, network) = facts.station.unwrap_or_default();
            let user_is_operator = admin || owner == Some(job.user_id);
            // Only jobs in images use their station's containers' network.
            let container_network = if job.image.is_some() { network } else { Default::default() };
            // A retry's output, or a reclaimed job's next run's, goes on from where the earlier
            // runs' ended.
            let log_offsets = if placed.entry.attempt > 1 || placed.entry.ran {
                self.host.log_offsets(job.mission_id, job_id, placed.part.as_ref().map_or(0, |part| part.rank)).await
            } else {
                LogOffsets::default()
            };
            // A requeued attempt resumes from what the last left among its results (a checkpoint),
            // which stand over the mission's files of the same paths.
            let mut inputs = files[&job.mission_id].clone();
            if job.requeue && placed.entry.attempt > 1 {
                let left = self.store.job_results(job).await?;
                inputs.retain(|file| !left.iter().any(|result| result.path == file.path));
                inputs.extend(left.into_iter().map(|f| InputFile { path: f.path, size: f.size, sha256: f.sha256 }));
            }
            // A gang's part: its rank and the nodes' addresses; on a gateway, where the batch
            // system places the nodes, the whole gang with no addresses.
            let launch = job.gang.as_ref().map(|gang| gang.launch).unwrap_or_default();
            let node = match (&placed.part, &job.gang) {
                (Some(part), _) => Some(mission_api::lz::GangNode {
                    nodes: part.lz_ids.len() as u32,
                    rank: part.rank,
                    hosts: part.lz_ids.iter().filter_map(|id| self.fleet.get(id)).map(LzState::node_address).collect(),
                    launch,
                }),
                (None, Some(gang)) if gang.nodes > 1 => {
                    Some(mission_api::lz::GangNode { nodes: gang.nodes, rank: 0, hosts: Vec::new(), launch })
                }
                (None, _) => None,
            };
            assignments.insert(
                (lz_id, job_id),
                Assignment {
                    job_id,
                    mission_id: job.mission_id,
                    user_id: job.user_id,
                    username,
                    user_is_operator,
                    command: job.command.clone(),
                    cpu_count: placed.entry.cpu_count,
                    memory_amount: placed.entry.memory_amount,
                    gpu_count: placed.entry.gpu_count,
                    gpu_indices: placed.gpu_indices.clone(),
                    time_limit: job.time_limit,
                    files: inputs,
                    attempt: placed.entry.attempt,
                    log_offsets,
                    array_index: job.array_index,
                    image: job.image.clone(),
                    session: job.session.as_ref().map(mission_api::JobSession::request),
                    container_network,
                    batch: job.batch.clone(),
                    task: job.task.as_ref().map(|task| Box::new(task.assignment())),
                    number: job.number,
                    array_number: job.array_number,
                    node,
                    signal: job.signal.clone(),
                    requeue: job.requeue,
                },
            );
        }
        Ok(assignments)
    }

    async fn handle(&mut self, event: Event) {
        let Event { call, reply } = event;
        // Calls answered after the batch is written carry their outcome into it; the others are
        // answered at once.
        let settled = match call {
            Call::Submit { job, audit } => {
                let submitted = self.submit(*job).await;
                self.audit_if_done(&submitted, audit);
                submitted.map(|job| Outcome::Job { job: Box::new(job) })
            }
            // Alike but for what no check looks at, they are all accepted or, by the first, all
            // refused.
            Call::SubmitMany { jobs, audit } => {
                let submitted = async {
                    if let Some(first) = jobs.first() {
                        self.check_queue_room(first, jobs.len() as u64)?;
                    }
                    let mut array_number = None;
                    for mut job in jobs {
                        job.array_number = job.array_number.or(array_number);
                        array_number = self.submit(job).await?.array_number;
                    }
                    Ok(Outcome::Done)
                }
                .await;
                self.audit_if_done(&submitted, audit);
                submitted
            }
            Call::Stop { job_id, by, audit } => {
                let stopped = self.stop(job_id, by);
                self.audit_if_done(&stopped, audit);
                stopped.map(|()| Outcome::Done)
            }
            Call::Control { job_id, control, by, audit } => {
                let done = match control {
                    JobControl::Hold => self.hold(job_id, &by),
                    JobControl::Release => self.release(job_id),
                    JobControl::Requeue => self.requeue_placed(job_id, &by),
                };
                self.audit_if_done(&done, audit);
                done.map(|()| Outcome::Done)
            }
            Call::Connect { lz, hello, session } => {
                self.connect(lz, *hello, session).await.map(|welcome| Outcome::Welcome { welcome: Box::new(welcome) })
            }
            Call::Reports { lz, reports } => self.reports(lz, reports).map(|()| Outcome::Done),
            Call::Disconnected { lz_id, session } => {
                let station = self.fleet.get(&lz_id).map(|lz| lz.station_id);
                self.fleet.update(lz_id, |lz| {
                    if lz.connection.as_ref().is_some_and(|c| c.id == session) {
                        lz.connection = None;
                    }
                });
                // Its station's heads may now wait for no landing zone online.
                self.dirty.extend(station);
                return reply.send(Ok(Outcome::Done));
            }
            Call::Heartbeat { lz_id } => {
                let until = Instant::now() + self.lease;
                let renewed = self.fleet.get_quiet_mut(&lz_id).filter(|lz| lz.connection.is_some()).map(|lz| {
                    lz.lease_until = Some(until);
                });
                if renewed.is_some() {
                    self.lease_ends.push(Reverse((until, lz_id)));
                }
                let result = match renewed {
                    Some(()) => self.store.lz_seen(lz_id, store::now()).await.map_err(SchedulerError::from),
                    None => Err(SchedulerError::Conflict("this landing zone is not connected; connect again".into())),
                };
                return reply.send(result.map(|()| Outcome::Done));
            }
            Call::Registered { lz } => {
                if self.fleet.get(&lz.lz_id).is_none() {
                    self.fleet.insert(lz.lz_id, LzState::new(lz.station_id, lz.name, None, Vec::new()));
                }
                self.forget_tokens();
                return reply.send(Ok(Outcome::Done));
            }
            Call::OpenTunnel { lz_id, url } => {
                let connection = self.fleet.get_quiet_mut(&lz_id).and_then(|lz| lz.connection.as_ref());
                let result = match connection {
                    Some(connection) => {
                        connection.send(Order::Tunnel { url });
                        Ok(Outcome::Done)
                    }
                    None => Err(SchedulerError::Conflict("the session's landing zone is not connected".into())),
                };
                return reply.send(result);
            }
            Call::Demand { lz_id } => return reply.send(Ok(Outcome::Demand { demand: self.demand(lz_id) })),
            Call::RemovePilot { station_id, lz_id } => {
                let removed = self.remove_pilot(station_id, lz_id).await;
                return reply.send(removed.map(|removed| Outcome::Removed { removed }));
            }
            // Answered after the pass it causes, which may start jobs.
            Call::LimitsChanged { project_id, station_id } => {
                self.limits_changed(project_id, station_id).await.map(|()| Outcome::Done)
            }
            Call::StationChanged { station_id } => self.station_changed(station_id).await.map(|()| Outcome::Done),
            Call::BudgetChanged { project_id } => self.budget_changed(project_id).await.map(|()| Outcome::Done),
            Call::ProjectGauges => return reply.send(Ok(Outcome::ProjectGauges { gauges: self.project_gauges() })),
            Call::ProjectUsage { project_id } => {
                return reply.send(Ok(Outcome::ProjectUsage { usage: self.project_usage(project_id) }));
            }
            Call::Remove { station_id, lz_id, audit } => {
                // The store writes the entries with the removal.
                let removed = mission_store::audit::with_notes(audit, self.remove(station_id, lz_id)).await;
                return reply.send(removed.map(|removed| Outcome::Removed { removed }));
            }
        };
        match settled {
            Ok(outcome) => self.batch.answers.push(Answer { reply, outcome }),
            Err(e) => reply.send(Err(e)),
        }
    }

    /// Reads a project's limits on a station again from the store; the station gets a pass, as
    /// a raised limit may let its jobs start.
    async fn limits_changed(&mut self, project_id: Uuid, station_id: Uuid) -> SchedulerResult<()> {
        let records = self.store.project_limits(Some(project_id)).await?;
        match records.into_iter().find(|r| r.station_id == station_id) {
            Some(record) => self.limits.set(record),
            None => self.limits.remove(station_id, project_id),
        }
        let share = self.limits.share(station_id, project_id);
        self.queue.lock().expect("not poisoned").set_share(station_id, project_id, share);
        self.dirty.insert(station_id);
        Ok(())
    }

    /// Writes the audit entries of a call with the batch, where the call did what it asked.
    fn audit_if_done<T>(&mut self, done: &SchedulerResult<T>, audit: Vec<AuditNote>) {
        if done.is_ok() {
            self.batch.audit.extend(audit);
        }
    }

    /// Reads whether a station reclaims borrowed room again from the store; it gets a pass.
    async fn station_changed(&mut self, station_id: Uuid) -> SchedulerResult<()> {
        let station = self.store.station(station_id).await?;
        match &station {
            Some(station) if !station.reclaim => self.no_reclaim.insert(station_id),
            _ => self.no_reclaim.remove(&station_id),
        };
        match station {
            Some(station) => self.energy.insert(station_id, station.energy),
            None => self.energy.remove(&station_id),
        };
        self.dirty.insert(station_id);
        Ok(())
    }

    /// Reads a project's budget again from the store, with what it spent this period; its
    /// stations get a pass, as a larger budget may let its jobs start.
    async fn budget_changed(&mut self, project_id: Uuid) -> SchedulerResult<()> {
        match self.store.project_budgets(Some(project_id)).await?.pop() {
            Some(record) => {
                let now = store::now();
                let currency = record.budget.money.as_ref().map(|m| m.currency.as_str());
                let spent = self.store.project_spent(project_id, record.budget.period.start(now), currency).await?;
                self.batch.warnings.extend(self.budgets.set(record, spent, now, false));
            }
            None => self.budgets.remove(project_id),
        }
        let stations: Vec<Uuid> =
            self.queue.lock().expect("not poisoned").project_lens(project_id).map(|(station, _)| station).collect();
        self.dirty.extend(stations);
        Ok(())
    }

    /// Every project's gauges, by project id.
    fn project_gauges(&self) -> Vec<super::ProjectGauge> {
        let mut gauges: HashMap<Uuid, super::ProjectGauge> = HashMap::new();
        fn of(gauges: &mut HashMap<Uuid, super::ProjectGauge>, project_id: Uuid) -> &mut super::ProjectGauge {
            gauges.entry(project_id).or_insert_with(|| super::ProjectGauge { project_id, ..Default::default() })
        }
        for ((_, project_id), held) in self.fleet.held_by_projects() {
            let in_use = &mut of(&mut gauges, project_id).in_use;
            in_use.cpus += held.cpus;
            in_use.memory_mb += held.memory;
            in_use.gpus += held.gpus;
            in_use.running_jobs += u64::from(held.jobs);
        }
        for ((_, project_id), queued) in self.queue.lock().expect("not poisoned").project_counts() {
            of(&mut gauges, project_id).in_use.queued_jobs += queued;
        }
        for (project_id, cpu, gpu) in self.budgets.left(store::now()) {
            let gauge = of(&mut gauges, project_id);
            (gauge.budget_left_cpu_hours, gauge.budget_left_gpu_hours) = (cpu, gpu);
        }
        for (project_id, (kwh, co2e_g, cost)) in &self.footprints {
            let gauge = of(&mut gauges, *project_id);
            (gauge.energy_kwh, gauge.co2e_g, gauge.cost) = (*kwh, *co2e_g, cost.clone());
        }
        let mut gauges: Vec<_> = gauges.into_values().collect();
        gauges.sort_unstable_by_key(|g| g.project_id);
        gauges
    }

    /// What a project's placed jobs hold and how many of its jobs wait, per station.
    fn project_usage(&self, project_id: Uuid) -> Vec<(Uuid, mission_api::ResourcesInUse)> {
        let mut usage: HashMap<Uuid, mission_api::ResourcesInUse> = HashMap::new();
        for (station, held) in self.fleet.held_by_project(project_id) {
            let entry = usage.entry(station).or_default();
            (entry.cpus, entry.memory_mb, entry.gpus) = (held.cpus, held.memory, held.gpus);
            entry.running_jobs = u64::from(held.jobs);
        }
        for (station, queued) in self.queue.lock().expect("not poisoned").project_lens(project_id) {
            usage.entry(station).or_default().queued_jobs = queued;
        }
        let mut usage: Vec<_> = usage.into_iter().collect();
        usage.sort_unstable_by_key(|(station, _)| *station);
        usage
    }

    /// Refuses a submission of `more` jobs like `job` past its project's queued-jobs cap on
    /// its station.
    fn check_queue_room(&self, job: &Job, more: u64) -> SchedulerResult<()> {
        let queued = self.queue.lock().expect("not poisoned").project_len(job.station_id, job.project_id);
        self.limits.queue_room(job.station_id, job.project_id, queued, more).map_err(SchedulerError::Conflict)
    }

    /// Drops the agent-token caches of every replica (after LZs were removed or re-keyed).
    fn forget_tokens(&self) {
        self.host.forget_tokens();
        self.sessions.broadcast_forget_tokens();
    }

    async fn submit(&mut self, mut job: Job) -> SchedulerResult<Job> {
        // Whether it could ever run: a look at the LZ it names, or at the sizes its station's LZs
        // come in (not at each of them: a station may have thousands).
        let (cpu, memory, gpu) = (job.cpu_count, job.memory_amount, job.gpu_count);
        let could_hold = match job.requested_lz_id {
            Some(lz_id) => {
                let lz = self.fleet.get(&lz_id).filter(|lz| lz.station_id == job.station_id);
                let lz = lz.ok_or_else(|| {
                    SchedulerError::invalid_field("lz_id", format!("the station has no landing zone {lz_id}"))
                })?;
                lz.capacity.is_none() || lz.could_hold_shape(cpu, memory, gpu)
            }
            None => {
                let station = self.fleet.station(&job.station_id).filter(|s| !s.all.is_empty());
                let station = station.ok_or_else(|| {
                    SchedulerError::invalid_field("station_id", "the station has no landing zones to run jobs on")
                })?;
                station.could_hold_shape(cpu, memory, gpu)
            }
        };
        if !could_hold {
            let candidates: Vec<&LzState> = match job.requested_lz_id {
                Some(id) => self.fleet.get(&id).into_iter().collect(),
                None => self.fleet.of_station(job.station_id).map(|(_, lz)| lz).collect(),
            };
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
            let whom = if job.requested_lz_id.is_some() {
                "the landing zone could never"
            } else {
                "no landing zone of the station could ever"
            };
            return Err(SchedulerError::Invalid {
                field: None,
                detail: format!(
                    "{whom} hold this job (cpu_count {cpu}, memory_amount {memory} MB, gpu_count {gpu}): {largest}"
                ),
            });
        }
        if let Some(gang) = job.gang.as_ref().filter(|gang| gang.nodes > 1) {
            // Only gangs look at each of the station's LZs: how many could ever hold a node. A
            // gateway into a batch system takes a gang whole, its batch system placing the nodes.
            let lzs = || self.fleet.of_station(job.station_id);
            let gateway = lzs().any(|(_, lz)| lz.max_jobs.is_some());
            let able = lzs()
                .filter(|(_, lz)| lz.max_jobs.is_none())
                .filter(|(_, lz)| lz.capacity.is_none() || lz.could_hold_shape(cpu, memory, gpu))
                .count();
            if able < gang.nodes as usize && !gateway {
                return Err(SchedulerError::invalid_field(
                    "nodes",
                    format!(
                        "the station has {able} landing zones that could ever hold a node of this job (cpu_count \
                         {cpu}, memory_amount {memory} MB, gpu_count {gpu} each); it asks for {}",
                        gang.nodes
                    ),
                ));
            }
        }
        let disk = mission_api::tes::JobTask::disk_mb_of(&job);
        if disk > 0 {
            // Only tasks ask for disk: a look at each of the station's LZs is a look for them.
            let has_disk = match job.requested_lz_id {
                Some(lz_id) => self.fleet.get(&lz_id).is_some_and(|lz| lz.has_disk(disk)),
                None => self.fleet.of_station(job.station_id).any(|(_, lz)| lz.has_disk(disk)),
            };
            if !has_disk {
                let most = self.fleet.of_station(job.station_id).filter_map(|(_, lz)| lz.disk_mb).max();
                return Err(SchedulerError::invalid_field(
                    "resources.disk_gb",
                    format!(
                        "no landing zone of the station has {disk} MB free for a task's files (the most is {} MB)",
                        most.unwrap_or(0)
                    ),
                ));
            }
        }
        if let Some(batch) = &job.batch {
            let shares = match job.requested_lz_id {
                Some(lz_id) => self.fleet.get(&lz_id).is_some_and(|lz| lz.shares(&batch.workdir)),
                None => self.fleet.of_station(job.station_id).any(|(_, lz)| lz.shares(&batch.workdir)),
            };
            if !shares {
                let whom =
                    if job.requested_lz_id.is_some() { "the landing zone" } else { "no landing zone of the station" };
                return Err(SchedulerError::invalid_field(
                    "batch.workdir",
                    format!(
                        "{whom} runs batch jobs in {}: a landing zone runs them under the directories it shares \
                         with the hosts jobs are submitted from (`mission lz --shared-path DIR`)",
                        batch.workdir
                    ),
                ));
            }
        }
        self.check_queue_room(&job, 1)?;
        let standing = self.wait_for(job.job_id, job.user_id, &job.after_ok, &job.after_any, &job.after_not_ok).await?;
        if let Standing::Unknown(field, dep) = standing {
            return Err(SchedulerError::invalid_field(field, format!("you have no job {dep}")));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        job.number = seq;
        if job.array_id.is_some() && job.array_number.is_none() {
            // The first element queued numbers its array.
            job.array_number = Some(seq);
        }
        if let Standing::Fails(why) = standing {
            // Never to run: it ends as it is written, without a trip through the queue.
            let now = store::now();
            job.status = JobStatus::Failed;
            job.reason = Some(why.clone());
            job.finished_at = Some(now);
            job.history.push(mission_api::JobTransition { status: JobStatus::Failed, at: now, detail: Some(why) });
            self.batch.inserts.push((seq, job.clone()));
            return Ok(job);
        }
        let user_held = job.pending_reason.as_ref().is_some_and(|r| r.kind == PendingKind::Held);
        let held = match self.dependencies.waiting_for(job.job_id) {
            _ if user_held => {
                self.held.insert(job.job_id);
                true
            }
            Some((dep, must_complete, more)) => {
                job.pending_reason = Some(dependency_reason(dep, must_complete, more));
                true
            }
            None => false,
        };
        let entry = Queued::of(&job, self.policies.share(job.retry.as_ref()));
        // A job naming a landing zone that is away says so from the start, whether or not a
        // pass gets to it. (With the whole station away, the heads say so; the rest are behind.)
        if !held
            && entry.requested_lz_id.is_some()
            && let Some(reason) = self.offline(job.station_id, &entry)
        {
            self.reasons.insert(job.job_id, reason.clone());
            job.pending_reason = Some(reason);
        }
        self.queue.lock().expect("not poisoned").insert(QueueKey::of(&job), seq, entry, held);
        self.dirty.insert(job.station_id);
        self.batch.inserts.push((seq, job.clone()));
        Ok(job)
    }

    /// Records what a queued job waits for: of `after_ok`, `after_any` and `after_not_ok`, the
    /// jobs that have not ended. Records nothing when one of `after_ok` ended without completing,
    /// one of `after_not_ok` completed, or one is not a job of `user_id`'s.
    async fn wait_for(
        &mut self,
        job_id: Uuid,
        user_id: Uuid,
        after_ok: &[Uuid],
        after_any: &[Uuid],
        after_not_ok: &[Uuid],
    ) -> Result<Standing, StoreError> {
        let mut unfinished: HashMap<Uuid, Uuid> = HashMap::new();
        let mut ended: HashMap<Uuid, JobStatus> = HashMap::new();
        let mut unknown = Vec::new();
        {
            let queue = self.queue.lock().expect("not poisoned");
            for &dep in after_ok.iter().chain(after_any).chain(after_not_ok) {
                let owner = queue.get(dep).map(|(key, _, _)| key.user_id);
                if let Some(owner) = owner.or_else(|| self.fleet.placed(&dep).map(|p| p.key.user_id)) {
                    unfinished.insert(dep, owner);
                } else if let Some(status) = self.batch.ended(dep) {
                    ended.insert(dep, status);
                } else {
                    unknown.push(dep);
                }
            }
        }
        // Jobs the scheduler does not hold have ended, or never were (or are someone else's).
        let stored = self.store.job_owners_and_statuses(&unknown).await?;
        for (dep, owner, status) in stored {
            if owner == user_id && status.is_final() {
                ended.insert(dep, status);
            }
        }
        for (field, deps) in [("after_ok", after_ok), ("after_any", after_any), ("after_not_ok", after_not_ok)] {
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
        if let Some(dep) = after_not_ok.iter().find(|dep| ended.get(dep) == Some(&JobStatus::Completed)) {
            return Ok(Standing::Fails(format!("the job it waited for to end without completing, {dep}, completed")));
        }
        let open = |deps: &[Uuid]| deps.iter().filter(|d| unfinished.contains_key(d)).copied().collect();
        self.dependencies.wait(job_id, open(after_ok), open(after_any), open(after_not_ok));
        Ok(Standing::Waits)
    }

    /// Ends a queued job that waited for another which did not complete.
    fn fail_waiting(&mut self, job_id: Uuid, why: String) {
        if self.dequeue(job_id).is_some() {
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
                    Settled::Free(job_id) => self.let_go(job_id),
                    Settled::Failed(job_id, why) => self.fail_waiting(job_id, why),
                }
            }
        }
    }

    fn stop(&mut self, job_id: Uuid, by: String) -> SchedulerResult<()> {
        if self.dequeue(job_id).is_some() {
            self.end(job_id, JobStatus::Stopped, format!("stopped by {by} while queued"));
            return Ok(());
        }
        let stopping = self.order_stop(job_id, |placed| {
            placed.stop_requested = true;
            // A user's stop wins over a reclaim: the job ends rather than going back in line.
            placed.requeue_reason = None;
        });
        let Some((lz_id, connected)) = stopping else {
            return Err(SchedulerError::Conflict("the job has ended already".into()));
        };
        if connected {
            return Ok(());
        }
        // The LZ is not connected: the job ends now; should the agent come back still running
        // it, its welcome tells it to drop the job.
        let station = self.fleet.get(&lz_id).expect("holders are LZs").station_id;
        self.take_off(lz_id, job_id);
        self.end(job_id, JobStatus::Stopped, format!("stopped by {by}"));
        self.dirty.insert(station);
        Ok(())
    }

    /// Holds a queued job: it keeps its place in line but is not placed until released. Holding
    /// a held job again changes nothing.
    fn hold(&mut self, job_id: Uuid, by: &str) -> SchedulerResult<()> {
        let taken = self.queue.lock().expect("not poisoned").remove(job_id);
        let Some((key, seq, entry)) = taken else {
            return Err(SchedulerError::Conflict("only a queued job can be held; this one has left the queue".into()));
        };
        self.queue.lock().expect("not poisoned").insert(key, seq, entry, true);
        if self.held.insert(job_id) {
            // The LZ it held in the last pass may go to others now.
            self.holds.remove(&job_id);
            self.reasons.remove(&job_id);
            self.reclaims.remove(&job_id);
            self.dirty.insert(key.station_id);
            self.batch.pending.push((job_id, Some(held_reason(by))));
        }
        Ok(())
    }

    /// Releases a held job: it may be placed once what else it waits for (other jobs, a retry's
    /// backoff) has ended. Releasing a job that is not held changes nothing.
    fn release(&mut self, job_id: Uuid) -> SchedulerResult<()> {
        if self.queue.lock().expect("not poisoned").get(job_id).is_none() {
            return Err(SchedulerError::Conflict(
                "only a queued job can be released; this one has left the queue".into(),
            ));
        }
        if !self.held.remove(&job_id) {
            return Ok(());
        }
        if let Some((dep, must_complete, more)) = self.dependencies.waiting_for(job_id) {
            self.batch.pending.push((job_id, Some(dependency_reason(dep, must_complete, more))));
        } else if self.backoffs.contains_key(&job_id) {
            self.batch
                .pending
                .push((job_id, Some(pending(PendingKind::Backoff, "waits out its retry's backoff".into()))));
        } else {
            self.let_go(job_id);
        }
        Ok(())
    }

    /// Stops a placed job to put it back in line at its old place (as a reclaim does); a queued
    /// job stays where it is.
    fn requeue_placed(&mut self, job_id: Uuid, by: &str) -> SchedulerResult<()> {
        if self.queue.lock().expect("not poisoned").get(job_id).is_some() {
            return Ok(());
        }
        let Some(lz_id) = self.fleet.holder(&job_id) else {
            return Err(SchedulerError::Conflict(
                "the job has ended: only an unfinished job can be requeued (a rerun starts an ended one again)".into(),
            ));
        };
        if self.fleet.placed(&job_id).is_some_and(|placed| placed.stop_requested) {
            return Err(SchedulerError::Conflict("the job is being stopped".into()));
        }
        let why = format!("requeued by {by}; back in line at its old place");
        let (_, connected) = self.order_stop(job_id, |placed| placed.requeue_reason = Some(why.clone())).expect("held");
        if !connected && let Some(placed) = self.take_off(lz_id, job_id) {
            self.requeue_stopped(placed);
        }
        Ok(())
    }

    async fn connect(&mut self, who: LzIdentity, hello: Hello, session: SessionId) -> SchedulerResult<Welcome> {
        if let Some(why) = account_mismatch(who.cluster_account.as_deref(), hello.cluster_account.as_deref()) {
            return Err(SchedulerError::Refused(why));
        }
        self.store.lz_connected(who.lz_id, hello.resources, hello.images, store::now()).await?;
        let mut gpus: Vec<u32> = hello.gpus.iter().map(|g| g.index).collect();
        if gpus.len() != hello.resources.gpu_count as usize {
            gpus = (0..hello.resources.gpu_count).collect();
        }
        // New capacity, the same jobs: recount what is free.
        let mut lz = LzState::new(who.station_id, who.name.clone(), Some(hello.resources), gpus);
        lz.max_jobs = hello.max_jobs;
        lz.images = hello.images;
        lz.shared_paths = hello.shared_paths;
        lz.disk_mb = hello.disk_mb;
        lz.node_address = hello.node_address;
        lz.connection = Some(Connection { id: session, sessions: self.sessions.clone() });
        let until = Instant::now() + self.lease;
        lz.lease_until = Some(until);
        self.lease_ends.push(Reverse((until, who.lz_id)));
        self.fleet.replace_keeping_jobs(who.lz_id, lz);

        let running: HashSet<Uuid> = hello.running.iter().copied().collect();
        let lz = self.fleet.get(&who.lz_id).expect("inserted above");
        let mut drop: Vec<Uuid> = running.iter().filter(|id| !lz.jobs.contains_key(id)).copied().collect();
        let (mut resend, mut requeue, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        let mut orphans_gone = Vec::new();
        for (id, placed) in &lz.jobs {
            if placed.orphan {
                if running.contains(id) {
                    self.batch.orders.push((who.lz_id, Pending::Stop(*id)));
                } else {
                    orphans_gone.push(*id);
                }
                continue;
            }
            if running.contains(id) {
                if placed.stop_requested || placed.requeue_reason.is_some() {
                    self.batch.orders.push((who.lz_id, Pending::Stop(*id)));
                }
                continue;
            }
            match placed.status {
                _ if placed.requeue_reason.is_some() => requeue.push(*id),
                JobStatus::Assigned if !placed.stop_requested => resend.push(*id),
                JobStatus::Assigned | JobStatus::Staging if !placed.stop_requested => requeue.push(*id),
                _ if placed.stop_requested => {
                    ends.push((*id, JobStatus::Stopped, "stopped while its landing zone was away"))
                }
                _ => ends.push((*id, JobStatus::Lost, "its landing zone restarted while the job ran")),
            }
        }
        for id in orphans_gone {
            self.fleet.release(who.lz_id, id);
        }
        let mut requeued = Vec::new();
        for id in requeue {
            requeued.extend(self.take_off(who.lz_id, id));
        }
        let mut ended = Vec::new();
        for (id, status, why) in ends {
            ended.extend(self.take_off(who.lz_id, id).map(|placed| (placed, status, why)));
            drop.retain(|d| *d != id);
        }
        self.end_released(who.lz_id, ended);
        for placed in requeued {
            if placed.requeue_reason.is_some() {
                self.requeue_stopped(placed);
            } else {
                self.requeue(placed, "its landing zone restarted before the job started");
            }
        }
        self.batch.orders.extend(resend.into_iter().map(|id| (who.lz_id, Pending::Run(id))));
        self.dirty.insert(who.station_id);
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
        let until = Instant::now() + self.lease;
        let Some(lz) =
            self.fleet.get_quiet_mut(&who.lz_id).filter(|lz| lz.connection.is_some() || lz.lease_until.is_some())
        else {
            return Err(SchedulerError::Conflict("this landing zone is not connected; connect again".into()));
        };
        lz.lease_until = Some(until);
        self.lease_ends.push(Reverse((until, who.lz_id)));
        let (mut finished, mut failed_attempts, mut measured) = (Vec::new(), Vec::new(), Vec::new());
        let (mut node_failures, mut nodes_completed, mut leads_completed) = (Vec::new(), Vec::new(), Vec::new());
        let mut requeued_attempts = Vec::new();
        let mut orphans_ended = Vec::new();
        let mut reclaimed = Vec::new();
        for report in reports {
            let current = |p: &&mut Placed| report.attempt.is_none_or(|attempt| attempt == p.entry.attempt);
            let Some(placed) = lz.jobs.get_mut(&report.job_id).filter(current) else {
                continue;
            };
            // Moves only go forward; a repeated or late report changes nothing, but a new reason
            // for the same step (why a job still waits in a batch system's queue) is recorded.
            let waits = report.status < JobStatus::Running;
            let shown = |placed: &Placed| {
                if waits { placed.pending_reason.as_ref().map(|p| p.detail.clone()) } else { placed.reason.clone() }
            };
            let new_reason = report.status == placed.status
                && !report.status.is_final()
                && report.reason.is_some()
                && report.reason != shown(placed);
            if (report.status <= placed.status && !new_reason) || report.status == JobStatus::Queued {
                continue;
            }
            let mut status = report.status;
            // A part an ended gang left here: only its end matters, which gives back its room.
            if placed.orphan {
                if status.is_final() {
                    orphans_ended.push(report.job_id);
                }
                continue;
            }
            // A gang's other nodes: their moves are their own, and only a failure is the job's
            // (one that completed holds its room until rank 0 ends).
            if let Some(rank) = placed.part.as_ref().map(|part| part.rank).filter(|rank| *rank > 0) {
                placed.status = status;
                let stopping = placed.stop_requested || placed.requeue_reason.is_some();
                if status.is_final() && status != JobStatus::Completed && !stopping {
                    node_failures.push((report.job_id, rank, status, report.exit_code, report.reason));
                } else if status == JobStatus::Completed {
                    nodes_completed.push(report.job_id);
                }
                continue;
            }
            if status.is_final() && placed.requeue_reason.is_some() && status != JobStatus::Completed {
                reclaimed.push(report.job_id);
                continue;
            }
            if status.is_final() && placed.stop_requested && status != JobStatus::Completed {
                status = JobStatus::Stopped;
            }
            let failure = RetryOn::of(status, report.exit_code, report.reason.as_deref());
            if placed.entry.requeue && matches!(failure, Some(RetryOn::TimeLimit | RetryOn::Lost)) {
                requeued_attempts.push((report.job_id, report.reason.unwrap_or_else(|| status.to_string())));
                continue;
            }
            if let Some((failure, policy)) = failure.and_then(|f| Some((f, retried(&placed.entry, f)?))) {
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
                placed.pending_reason.clone_from(&update.pending);
            } else {
                update.reason = report.reason;
            }
            update.limits = report.limits;
            // An agent's figures are taken as measured, but none may be negative.
            update.usage = report
                .usage
                .filter(|u| status.is_final() && u.wall_time >= 0.0 && u.cpu_time.is_none_or(|cpu| cpu >= 0.0))
                .map(|usage| with_footprint(&self.energy, placed.key.station_id, &placed.entry, usage));
            if let Some(usage) = &update.usage {
                measured.push((report.job_id, usage.wall_time));
                let totals = self.footprints.entry(placed.key.project_id).or_default();
                totals.0 += usage.energy_kwh.unwrap_or(0.0);
                totals.1 += usage.co2e_g.unwrap_or(0.0);
                if let Some(cost) = &usage.cost {
                    *totals.2.entry(cost.currency.clone()).or_default() += cost.amount;
                }
                if let Some(currency) = self.budgets.footprint_counted(placed.key.project_id) {
                    let money = usage.cost.as_ref().filter(|c| Some(c.currency.as_str()) == currency);
                    let used = Charge::Footprint {
                        kwh: usage.energy_kwh.unwrap_or(0.0),
                        money: money.map_or(0.0, |c| c.amount),
                    };
                    let charged = self.budgets.charge(report.job_id, placed.key.project_id, used, store::now());
                    self.batch.warnings.extend(charged);
                }
            }
            placed.status = status;
            if update.reason.is_some() || status == JobStatus::Running {
                placed.reason.clone_from(&update.reason);
            }
            // A gang launched on every node ends once all have.
            if status == JobStatus::Completed && placed.part.is_some() && !placed.entry.launch_first {
                leads_completed.push(update);
                continue;
            }
            if status.is_final() {
                finished.push(report.job_id);
            }
            self.batch.updates.push(update);
        }
        for update in leads_completed {
            if self.nodes_still_running(update.job_id) {
                self.gang_ends.insert(update.job_id, update);
            } else {
                finished.push(update.job_id);
                self.batch.updates.push(update);
            }
        }
        for job_id in nodes_completed {
            if self.gang_ends.contains_key(&job_id) && !self.nodes_still_running(job_id) {
                let end = self.gang_ends.remove(&job_id).expect("looked at");
                finished.push(job_id);
                self.batch.updates.push(end);
            }
        }
        // What the agent measured is what the job is charged, rather than the scheduler's clock.
        for (job_id, wall_time) in measured {
            self.fleet.usage.measured(job_id, wall_time);
        }
        if !finished.is_empty() {
            for id in finished {
                self.take_off(who.lz_id, id);
            }
            self.dirty.insert(who.station_id);
        }
        let failed_attempts: Vec<_> = failed_attempts
            .into_iter()
            .filter_map(|(id, policy, failure, why)| {
                self.take_off(who.lz_id, id).map(|placed| (placed, policy, failure, why))
            })
            .collect();
        for (placed, policy, failure, why) in failed_attempts {
            self.retry(placed, &policy, failure, &why);
        }
        for id in reclaimed {
            if let Some(placed) = self.take_off(who.lz_id, id) {
                self.requeue_stopped(placed);
            }
        }
        if !orphans_ended.is_empty() {
            for job_id in orphans_ended {
                self.fleet.release(who.lz_id, job_id);
            }
            self.dirty.insert(who.station_id);
        }
        for (job_id, why) in requeued_attempts {
            if let Some(placed) = self.take_off(who.lz_id, job_id) {
                self.next_attempt(placed, &format!("its attempt ended: {why}"));
            }
        }
        for (job_id, rank, status, exit_code, reason) in node_failures {
            self.gang_node_failed(who.lz_id, job_id, rank, status, exit_code, reason);
        }
        Ok(())
    }

    /// Whether a node of a placed gang other than rank 0 has not ended what it runs.
    fn nodes_still_running(&self, job_id: Uuid) -> bool {
        let (Some(lz_id), Some(leader)) = (self.fleet.holder(&job_id), self.fleet.placed(&job_id)) else {
            return false;
        };
        leader.other_nodes(lz_id).any(|node| {
            self.fleet.get(&node).and_then(|lz| lz.jobs.get(&job_id)).is_some_and(|part| !part.status.is_final())
        })
    }

    /// Ends a gang whose node `rank` (on `lz_id`) ended `status` while rank 0 ran on (its
    /// other nodes are stopped), or tries it again where its policy says so: the job fails with
    /// a reason naming the node.
    fn gang_node_failed(
        &mut self,
        lz_id: Uuid,
        job_id: Uuid,
        rank: u32,
        status: JobStatus,
        exit_code: Option<i32>,
        reason: Option<String>,
    ) {
        let name = self.fleet.get(&lz_id).map(|lz| lz.name.clone()).unwrap_or_default();
        let said = reason.clone().unwrap_or_else(|| status.to_string());
        let why = format!("node {rank} (landing zone {name}) ended: {said}");
        let Some(placed) = self.take_off(lz_id, job_id) else { return };
        self.dirty.insert(placed.key.station_id);
        let failure = RetryOn::of(status, exit_code, reason.as_deref());
        if placed.entry.requeue && matches!(failure, Some(RetryOn::TimeLimit | RetryOn::Lost)) {
            return self.next_attempt(placed, &why);
        }
        if let Some((failure, policy)) = failure.and_then(|f| Some((f, retried(&placed.entry, f)?))) {
            self.retry(placed, &policy, failure, &why);
            return;
        }
        let status = if status == JobStatus::Lost { JobStatus::Lost } else { JobStatus::Failed };
        let mut update = JobUpdate::new(job_id, status);
        update.exit_code = exit_code;
        update.detail = Some(why.clone());
        update.reason = Some(why);
        self.batch.updates.push(update);
    }

    /// The queued jobs of the gateway's station that name no landing zone and that a pilot (as
    /// large as the gateway offers) could hold.
    fn demand(&self, gateway: Uuid) -> mission_api::lz::Demand {
        let Some(lz) = self.fleet.get(&gateway) else { return mission_api::lz::Demand::default() };
        let queue = self.queue.lock().expect("not poisoned");
        let (jobs, cpus) = queue.demand(lz.station_id, |cpu, memory, gpu| lz.could_hold_shape(cpu, memory, gpu));
        mission_api::lz::Demand { queued_jobs: u32::try_from(jobs).unwrap_or(u32::MAX), queued_cpus: cpus }
    }

    /// Removes a pilot's landing zone; the jobs it had not finished go back in the queue (its
    /// allocation ended: that is no fault of theirs).
    async fn remove_pilot(&mut self, station_id: Uuid, lz_id: Uuid) -> SchedulerResult<bool> {
        let removed = self.store.delete_landing_zone(station_id, lz_id).await?;
        let held = self.take_all_off(lz_id);
        self.fleet.remove(lz_id);
        for placed in held {
            if placed.requeue_reason.is_some() {
                self.requeue_stopped(placed);
            } else if placed.stop_requested {
                self.end(placed.entry.job_id, JobStatus::Stopped, "stopped; its pilot ended".into());
            } else {
                self.requeue(placed, "its pilot's allocation ended before the job did");
            }
        }
        self.forget_tokens();
        Ok(removed)
    }

    async fn remove(&mut self, station_id: Uuid, lz_id: Option<Uuid>) -> SchedulerResult<bool> {
        let concerned = |lz: Uuid| lz_id.is_none_or(|wanted| wanted == lz);
        let queued = {
            let queue = self.queue.lock().expect("not poisoned");
            match lz_id {
                Some(lz_id) => queue.requesting(lz_id),
                None => queue.station_len(station_id),
            }
        };
        let placed: usize =
            self.fleet.of_station(station_id).filter(|(id, _)| concerned(*id)).map(|(_, lz)| lz.jobs.len()).sum();
        if queued + placed as u64 > 0 {
            let what = if lz_id.is_some() { "landing zone" } else { "station" };
            return Err(SchedulerError::Conflict(format!(
                "the {what} has {} jobs that have not ended; stop them first",
                queued + placed as u64
            )));
        }
        let removed = match lz_id {
            Some(lz_id) => self.store.delete_landing_zone(station_id, lz_id).await?,
            None => self.store.delete_station(station_id).await?,
        };
        // Dropping an LZ's state ends its agent's order stream; its token no longer works.
        let gone: Vec<Uuid> = self.fleet.of_station(station_id).map(|(id, _)| id).filter(|id| concerned(*id)).collect();
        for id in gone {
            self.fleet.remove(id);
        }
        self.forget_tokens();
        Ok(removed)
    }

    /// When the soonest lease ends (dropping the stale ends on top).
    fn next_lease_end(&mut self) -> Option<Instant> {
        while let Some(Reverse((until, lz_id))) = self.lease_ends.peek().copied() {
            if self.fleet.get(&lz_id).and_then(|lz| lz.lease_until) == Some(until) {
                return Some(until);
            }
            self.lease_ends.pop();
        }
        None
    }

    fn expire_leases(&mut self) {
        let now = Instant::now();
        let mut expired = Vec::new();
        while self.next_lease_end().is_some_and(|until| until <= now) {
            let Some(Reverse((_, lz_id))) = self.lease_ends.pop() else { break };
            expired.push(lz_id);
        }
        // A lease given twice at the same instant is on the heap twice.
        expired.sort();
        expired.dedup();
        for lz_id in expired {
            let (mut requeued, mut ends): (_, Vec<(Placed, JobStatus, &str)>) = (Vec::new(), Vec::new());
            let station = self.fleet.update(lz_id, |lz| {
                lz.lease_until = None;
                lz.connection = None;
                lz.station_id
            });
            self.dirty.extend(station);
            for placed in self.take_all_off(lz_id) {
                match placed.status {
                    _ if placed.requeue_reason.is_some() => requeued.push(placed),
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
            self.end_released(lz_id, ends);
            for placed in requeued {
                if placed.requeue_reason.is_some() {
                    self.requeue_stopped(placed);
                } else {
                    let why = on_node(&placed, lz_id, "its landing zone went silent before the job started");
                    self.requeue(placed, &why);
                }
            }
        }
    }

    /// Ends jobs that have left their LZs, each in the status given for the reason given; a lost
    /// one is tried again instead where its policy says so.
    /// `lz_id` is the LZ they left, which a gang's reason names as its node.
    fn end_released(&mut self, lz_id: Uuid, ends: Vec<(Placed, JobStatus, &str)>) {
        for (placed, status, why) in ends {
            let why = on_node(&placed, lz_id, why);
            match status {
                JobStatus::Lost => self.lose(placed, &why),
                _ => self.end(placed.entry.job_id, status, why),
            }
        }
    }

    /// Runs a placement pass over every station where something happened since the last.
    fn place(&mut self) {
        self.settle_usage();
        let mut stations: Vec<Uuid> = self.dirty.drain().collect();
        stations.sort_unstable();
        for station in stations {
            self.place_on(station);
        }
    }

    /// One placement pass over a station's sub-queue heads (see the module docs for the order),
    /// in the batch, which also brings the pending reasons of the jobs it looks at up to date.
    fn place_on(&mut self, station: Uuid) {
        let Some(lzs) = self.fleet.station(&station) else { return };
        let offline = lzs.connected() == 0;
        let mut reserved: HashSet<Uuid> = HashSet::new();
        let mut could_hold = HashMap::new();
        // The LZs counting resources that have a free CPU and are not held: kept as the pass
        // holds and fills them, so that "is there room left" needs no walk past the held ones.
        let mut free_unheld = self.fleet.with_free_cpus(station);
        // The LZs held, out of the station's index by room until the pass ends, so that its
        // walks for room do not step over them one by one.
        let mut aside = Vec::new();
        let (mut passed_over, mut examined, mut placed) = (0, 0, 0);
        let mut out_of_room = false;
        let now = store::now();
        let mut reclaiming_for = self.reclaiming_for(station);
        while passed_over < PASS_DEPTH {
            let (key, seq, number, entry) = {
                let queue = self.queue.lock().expect("not poisoned");
                let Some((seq, number)) = queue.next_candidate(station) else { break };
                (queue.key(number), seq, number, queue.runnable_at(number, seq).cloned().expect("candidates run"))
            };
            examined += 1;
            let (verdict, reason) = self.examine(&key, &entry, &reserved, &mut could_hold, now, reclaiming_for);
            match &verdict {
                Verdict::Reclaim(plan) => {
                    self.reclaim(key.station_id, key.project_id, plan);
                    self.reclaims.insert(entry.job_id, (key.station_id, key.project_id));
                    reclaiming_for = Some(key.project_id);
                }
                // Nothing (more) to reclaim for it.
                _ => {
                    self.reclaims.remove(&entry.job_id);
                }
            }
            let job_id = entry.job_id;
            // With no LZ online nothing starts: the candidates say so, and the pass goes no deeper.
            let goes_on = !matches!(verdict, Verdict::SkipQueue) && !offline;
            let started = matches!(verdict, Verdict::Place(_));
            match verdict {
                Verdict::Place(nodes) => {
                    let with_free_cpus = |fleet: &Fleet| nodes.iter().filter(|id| fleet.has_free_cpus(id)).count();
                    let had_free = with_free_cpus(&self.fleet);
                    // Taken out of line: the sub-queue's next job is its candidate.
                    self.start(&nodes, key, seq, entry);
                    // Charged as it starts: its project and user rank anew for the next pick.
                    self.settle_usage();
                    free_unheld -= had_free - with_free_cpus(&self.fleet);
                    placed += 1;
                }
                // Reclaimed room is held for the job while the borrowed jobs end.
                Verdict::Hold(lz_id) | Verdict::Reclaim(Plan { lz_id, .. }) => {
                    self.holds.insert(job_id, lz_id);
                    free_unheld -= usize::from(reserved.insert(lz_id) && self.fleet.has_free_cpus(&lz_id));
                    if self.fleet.set_aside(lz_id) {
                        aside.push(lz_id);
                    }
                }
                // A gang holds all the LZs it waits on for the pass, or none.
                Verdict::HoldGang(nodes) => {
                    for lz_id in nodes {
                        free_unheld -= usize::from(reserved.insert(lz_id) && self.fleet.has_free_cpus(&lz_id));
                        if self.fleet.set_aside(lz_id) {
                            aside.push(lz_id);
                        }
                    }
                }
                Verdict::PassOver | Verdict::SkipQueue => {
                    self.holds.remove(&job_id);
                    passed_over += 1;
                }
            }
            if let Some(reason) = reason {
                self.write_reason(job_id, reason);
            }
            if !started {
                let mut queue = self.queue.lock().expect("not poisoned");
                if goes_on { queue.pass_over(number, seq) } else { queue.set_aside(number) }
            }
            // Once no LZ that is not held has room, one more job is looked at (the next in line
            // then says what it waits for, holding the LZ it waits on), and the pass ends.
            let room_left = free_unheld > 0 || self.fleet.gateway_room_left(station, &|id| reserved.contains(&id));
            if !offline && !room_left {
                if out_of_room {
                    break;
                }
                out_of_room = true;
            }
        }
        self.queue.lock().expect("not poisoned").end_pass();
        for lz_id in aside {
            self.fleet.put_back(lz_id);
        }
        let mut work = self.work.lock().expect("not poisoned");
        work.passes += 1;
        work.examined += examined;
        work.placed += placed;
    }

    /// The project that borrowed room on `station` is being reclaimed for, while some is.
    fn reclaiming_for(&self, station: Uuid) -> Option<Uuid> {
        self.reclaims.values().find(|(on, _)| *on == station).map(|(_, project)| *project)
    }

    /// Stops the borrowed jobs of `plan` (with the grace period), for `project` on `station`:
    /// each goes back in line when it has ended.
    fn reclaim(&mut self, station: Uuid, project: Uuid, plan: &Plan) {
        let (project_name, station_name) = self.limits.names(station, project).unwrap_or_default();
        let why = format!(
            "its room was reclaimed for project {project_name}, below its nominal on station {station_name} (the job \
             ran on borrowed room); back in line at its old place"
        );
        for victim in &plan.victims {
            self.order_stop(*victim, |placed| placed.requeue_reason = Some(why.clone()));
        }
    }

    /// What a pass does with a queued job, and why it waits if it does. `could_hold` remembers,
    /// for the pass, whether any online LZ of the station could ever hold a job of a shape (CPUs,
    /// MB, GPUs): without it, every job passed over would walk the station's LZs. While room is
    /// reclaimed on the station for a project (`reclaiming_for`), other projects' jobs that
    /// would borrow wait.
    fn examine(
        &self,
        key: &QueueKey,
        job: &Queued,
        reserved: &HashSet<Uuid>,
        could_hold: &mut HashMap<Kind, bool>,
        now: chrono::DateTime<chrono::Utc>,
        reclaiming_for: Option<Uuid>,
    ) -> (Verdict, Option<PendingReason>) {
        if let Some(limit) = self.max_running_per_user.filter(|limit| self.fleet.placed_of(&key.user_id) >= *limit) {
            let why =
                format!("its user has {limit} jobs on landing zones, the most the server allows one user at once");
            return (Verdict::SkipQueue, Some(pending(PendingKind::Quota, why)));
        }
        let held = || self.fleet.held_by(key.station_id, key.project_id);
        if let Some(why) = self.limits.refusal(key.station_id, key.project_id, held, job) {
            return (Verdict::SkipQueue, Some(pending(PendingKind::Quota, why)));
        }
        if let Some((why, every_job)) = self.budgets.refusal(key.project_id, self.budget_needs(key, job), now) {
            // Where only some jobs are refused (too long, or with GPUs) later ones may still start.
            let verdict = if every_job { Verdict::SkipQueue } else { Verdict::PassOver };
            return (verdict, Some(pending(PendingKind::Quota, why)));
        }
        if let Some(owed) = reclaiming_for.filter(|owed| *owed != key.project_id)
            && !self.limits.within_nominal(key.station_id, key.project_id, held(), job)
        {
            let (project, station) = self.limits.names(key.station_id, owed).unwrap_or_default();
            let why = format!(
                "room on station {station} is being reclaimed for project {project}, below its nominal there; jobs \
                 beyond their project's nominal wait until it is"
            );
            return (Verdict::SkipQueue, Some(pending(PendingKind::Quota, why)));
        }
        if let Some(reason) = self.offline(key.station_id, job) {
            // A job naming an LZ that is away waits alone; without any LZ online, all do.
            let verdict = if job.requested_lz_id.is_some() { Verdict::PassOver } else { Verdict::SkipQueue };
            return (verdict, Some(reason));
        }
        let Some(lzs) = self.fleet.station(&key.station_id) else { return (Verdict::SkipQueue, None) };
        if job.is_gang() {
            return self.examine_gang(lzs, job, reserved);
        }
        let free = |id: &Uuid| !reserved.contains(id) && job.requested_lz_id.is_none_or(|r| r == *id);
        let lz = |id: &Uuid| self.fleet.get(id).expect("indexed LZs exist");
        // Best fit: the LZ left with the fewest free CPUs, then the least memory; the index is in
        // that order from the first with enough CPUs.
        let counting = lzs
            .by_room
            .range((i64::from(job.cpu_count), i64::MIN, Uuid::nil())..)
            .filter(|(_, _, id)| free(id) && lz(id).fits_now(job))
            .map(|(cpu, memory, id)| (cpu - i64::from(job.cpu_count), *memory, *id))
            .next();
        let gateway = lzs
            .gateways
            .iter()
            .filter(|id| free(id) && lz(id).fits_now(job))
            .map(|id| (lz(id).free_cpu - i64::from(job.cpu_count), lz(id).free_memory, *id))
            .min();
        if let Some((_, _, lz_id)) = counting.into_iter().chain(gateway).min() {
            return (Verdict::Place(vec![lz_id]), None);
        }
        // No room now: a job within its project's nominal may have borrowed room reclaimed.
        if !self.no_reclaim.contains(&key.station_id)
            && self.limits.guarantees_on(key.station_id)
            && self.limits.within_nominal(key.station_id, key.project_id, held(), job)
            // LZs this pass holds count: borrowers may hold them, and a plan counts the jobs
            // already stopping there for another.
            && let Some(plan) = reclaim::plan(&self.fleet, &self.limits, key.station_id, key.project_id, job, |id| {
                job.requested_lz_id.is_none_or(|r| r == *id)
            })
        {
            let (project, _) = self.limits.names(key.station_id, key.project_id).unwrap_or_default();
            let stopping = if plan.victims.is_empty() {
                "borrowed jobs".to_owned()
            } else {
                format!("{} borrowed jobs", plan.victims.len())
            };
            let why = format!(
                "waiting for {stopping} to stop on landing zone {}, reclaimed for project {project}, which is below its \
                 nominal",
                lz(&plan.lz_id).name
            );
            return (Verdict::Reclaim(plan), Some(pending(PendingKind::Resources, why)));
        }
        // Held for it: the LZ it held last while that one still can, else the LZ best able to
        // hold it, with the most free room.
        let kept = self.holds.get(&job.job_id).copied().filter(|id| {
            free(id)
                && self
                    .fleet
                    .get(id)
                    .is_some_and(|l| l.station_id == key.station_id && l.connection.is_some() && l.could_hold(job))
        });
        if let Some(lz_id) = kept {
            // Its pending reason, which names the LZ, is the one written when it took the hold.
            return (Verdict::Hold(lz_id), None);
        }
        let counting = lzs.by_room.iter().rev().find(|(_, _, id)| free(id) && lz(id).could_hold(job)).copied();
        let gateway = lzs
            .gateways
            .iter()
            .filter(|id| free(id) && lz(id).could_hold(job))
            .map(|id| (lz(id).free_cpu, lz(id).free_memory, *id))
            .max();
        if let Some((_, _, lz_id)) = counting.into_iter().chain(gateway).max() {
            let gpus = if job.gpu_count > 0 { format!(", {} GPUs", job.gpu_count) } else { String::new() };
            let why = format!(
                "waiting for {} CPUs, {} MB{gpus} to be free on landing zone {}, held for it",
                job.cpu_count,
                job.memory_amount,
                lz(&lz_id).name
            );
            return (Verdict::Hold(lz_id), Some(pending(PendingKind::Resources, why)));
        }
        let any_could = match job.requested_lz_id {
            Some(lz_id) => self.fleet.get(&lz_id).is_some_and(|l| l.station_id == key.station_id && l.could_hold(job)),
            // Over every LZ online, those the pass holds (out of the index) too.
            None => *could_hold
                .entry((job.cpu_count, job.memory_amount, job.gpu_count, job.needs_image, job.workdir.clone()))
                .or_insert_with(|| lzs.all.iter().map(lz).any(|l| l.connection.is_some() && l.could_hold(job))),
        };
        if any_could {
            return (Verdict::PassOver, Some(behind()));
        }
        let images = if job.needs_image { " in a container image" } else { "" };
        let shared = job.workdir.as_deref().map(|dir| format!(", sharing {dir}")).unwrap_or_default();
        let why = format!(
            "no landing zone online could hold it ({} CPUs, {} MB, {} GPUs{images}{shared})",
            job.cpu_count, job.memory_amount, job.gpu_count
        );
        (Verdict::PassOver, Some(pending(PendingKind::NoLandingZone, why)))
    }

    /// What a pass does with a gang (a job on `job.nodes` LZs of `lzs`' station at once), and
    /// why it waits if it does: placed on as many LZs with room now, best fit first; else
    /// holding, for the pass, the LZs best able to hold it, all of them or none. Holds are taken afresh in queue order each pass and
    /// never take room, so two gangs cannot each hold part of what the other needs.
    fn examine_gang(
        &self,
        lzs: &StationLzs,
        job: &Queued,
        reserved: &HashSet<Uuid>,
    ) -> (Verdict, Option<PendingReason>) {
        let lz = |id: &Uuid| self.fleet.get(id).expect("indexed LZs exist");
        let free = |id: &Uuid| !reserved.contains(id);
        let nodes = job.nodes as usize;
        let fit: Vec<Uuid> = lzs
            .by_room
            .range((i64::from(job.cpu_count), i64::MIN, Uuid::nil())..)
            .filter(|(_, _, id)| free(id) && lz(id).fits_now(job))
            .map(|(_, _, id)| *id)
            .take(nodes)
            .collect();
        if fit.len() == nodes {
            return (Verdict::Place(fit), None);
        }
        // A gateway takes the gang whole, as one batch job of its nodes.
        let gateway = lzs
            .gateways
            .iter()
            .filter(|id| free(id) && lz(id).fits_now(job))
            .min_by_key(|id| (lz(id).jobs.len(), **id))
            .copied();
        if let Some(lz_id) = gateway {
            return (Verdict::Place(vec![lz_id]), None);
        }
        if lzs.gateways.iter().any(|id| lz(id).connection.is_some() && lz(id).could_hold(job)) {
            return (Verdict::PassOver, Some(behind()));
        }
        let gpus = if job.gpu_count > 0 { format!(", {} GPUs", job.gpu_count) } else { String::new() };
        let shape = format!("{} free CPUs, {} MB{gpus}", job.cpu_count, job.memory_amount);
        let could: Vec<Uuid> = lzs
            .by_room
            .iter()
            .rev()
            .filter(|(_, _, id)| free(id) && lz(id).could_hold(job))
            .map(|(_, _, id)| *id)
            .take(nodes)
            .collect();
        if could.len() == nodes {
            let why = format!(
                "needs {nodes} landing zones with {shape} on its station; {} have them now, the others are held for it",
                fit.len()
            );
            return (Verdict::HoldGang(could), Some(pending(PendingKind::Resources, why)));
        }
        // Over every LZ online, those the pass holds (out of the index) too.
        let online = lzs
            .all
            .iter()
            .map(lz)
            .filter(|l| l.connection.is_some() && l.max_jobs.is_none() && l.could_hold(job))
            .count();
        if online >= nodes {
            return (Verdict::PassOver, Some(behind()));
        }
        let why = format!(
            "needs {nodes} landing zones with {shape} on its station; {online} online could ever hold a node of it"
        );
        (Verdict::PassOver, Some(pending(PendingKind::NoLandingZone, why)))
    }

    /// What a job may spend of its project's budget: CPU-seconds and GPU-seconds for its time
    /// limit (or the expected run), and where the budget counts them the energy and money its
    /// station's model gives for that time with every CPU busy.
    fn budget_needs(&self, key: &QueueKey, job: &Queued) -> Spent {
        let seconds = self.fleet.usage.expected_seconds(job.time_limit);
        let (cpus, memory_mb, gpus) = job.total();
        let mut needs = Spent {
            cpu_seconds: f64::from(cpus) * seconds,
            gpu_seconds: f64::from(gpus) * seconds,
            ..Spent::default()
        };
        if let Some(currency) = self.budgets.footprint_counted(key.project_id) {
            let default = StationEnergy::default();
            let settings = self.energy.get(&key.station_id).unwrap_or(&default);
            let footprint = settings.footprint(&Held { cpus, memory_mb, gpus }, seconds, None, None);
            needs.kwh = footprint.energy_kwh;
            needs.money = footprint.cost.filter(|c| Some(c.currency.as_str()) == currency).map_or(0.0, |c| c.amount);
        }
        needs
    }

    /// Places a queued job on an LZ, or a gang on its LZs (rank order) all at once, in the
    /// batch.
    fn start(&mut self, nodes: &[Uuid], key: QueueKey, seq: u64, entry: Queued) {
        self.dequeue(entry.job_id);
        self.budgets.hold(entry.job_id, key.project_id, self.budget_needs(&key, &entry));
        let lz = self.fleet.get(&nodes[0]).expect("chosen from the index");
        let mut update = JobUpdate::new(entry.job_id, JobStatus::Assigned);
        update.lz_id = Some(Some(nodes[0]));
        update.detail = Some(match nodes.len() {
            1 => format!("landing zone {}", lz.name),
            n => {
                let names: Vec<&str> =
                    nodes.iter().filter_map(|id| self.fleet.get(id)).map(|lz| lz.name.as_str()).collect();
                format!("{n} landing zones {}", names.join(", "))
            }
        });
        if entry.is_gang() {
            update.node_lz_ids = Some(nodes.to_vec());
        }
        let placed = Placed {
            entry,
            key,
            seq,
            status: JobStatus::Assigned,
            gpu_indices: Vec::new(),
            reason: None,
            pending_reason: None,
            stop_requested: false,
            requeue_reason: None,
            part: None,
            orphan: false,
        };
        let job_id = placed.entry.job_id;
        update.gpu_indices = Some(self.hold_parts(nodes, placed));
        self.batch.updates.push(update);
        self.batch.orders.extend(nodes.iter().map(|lz_id| (*lz_id, Pending::Run(job_id))));
    }

    /// Holds a placed job on its LZ, each with the GPUs it takes there (none on a gateway) — a
    /// gang's parts on each of its `nodes`, rank 0 first (a gang on a gateway is one part: its
    /// batch system places the nodes); answers rank 0's GPUs.
    fn hold_parts(&mut self, nodes: &[Uuid], mut placed: Placed) -> Vec<u32> {
        let gpus_of = |fleet: &Fleet, lz_id: &Uuid, placed: &Placed| -> Vec<u32> {
            let lz = fleet.get(lz_id).expect("held on an LZ");
            if lz.max_jobs.is_some() {
                return Vec::new();
            }
            // A job placed before (a restart) keeps the GPUs it was given, where they are free.
            let kept: Vec<u32> = placed.gpu_indices.iter().copied().filter(|g| lz.free_gpus.contains(g)).collect();
            if kept.len() == placed.entry.gpu_count as usize {
                return kept;
            }
            lz.free_gpus.iter().take(placed.entry.gpu_count as usize).copied().collect()
        };
        if nodes.len() > 1 {
            let lz_ids: Arc<[Uuid]> = nodes.into();
            for (rank, lz_id) in nodes.iter().enumerate().skip(1) {
                let mut part = Placed {
                    entry: placed.entry.clone(),
                    key: placed.key,
                    seq: placed.seq,
                    status: placed.status,
                    gpu_indices: Vec::new(),
                    reason: None,
                    pending_reason: None,
                    stop_requested: false,
                    requeue_reason: None,
                    part: Some(GangPart { rank: rank as u32, lz_ids: lz_ids.clone() }),
                    orphan: false,
                };
                part.gpu_indices = gpus_of(&self.fleet, lz_id, &part);
                self.fleet.hold(*lz_id, part);
            }
            placed.part = Some(GangPart { rank: 0, lz_ids });
        }
        placed.gpu_indices = gpus_of(&self.fleet, &nodes[0], &placed);
        let gpus = placed.gpu_indices.clone();
        self.fleet.hold(nodes[0], placed);
        gpus
    }

    /// Takes in the usage that changed since the last call (jobs placed, released, or running
    /// past their charge without a time limit): budgets are
    /// charged what the jobs that left used (warnings go in the batch), and the queue is told, so
    /// that fair-share ranks by it.
    fn settle_usage(&mut self) {
        self.fleet.usage.accrue();
        let spent = self.fleet.usage.spent();
        if !spent.is_empty() {
            let now = store::now();
            for (job_id, project, cpu, gpu) in spent {
                let used = Charge::Time { cpu_seconds: cpu, gpu_seconds: gpu };
                self.batch.warnings.extend(self.budgets.charge(job_id, project, used, now));
            }
        }
        let changed = self.fleet.usage.changed();
        if changed.is_empty() || !self.fair_share {
            return;
        }
        let usage = &self.fleet.usage;
        let mut queue = self.queue.lock().expect("not poisoned");
        for (project, user) in changed {
            queue.set_usage(project, user, usage.of_project(project), usage.of_member(project, user));
        }
    }

    /// Writes a queued job's pending reason unless it is the one written last.
    fn write_reason(&mut self, job_id: Uuid, reason: PendingReason) {
        if self.reasons.get(&job_id) != Some(&reason) {
            self.reasons.insert(job_id, reason.clone());
            self.batch.pending.push((job_id, Some(reason)));
        }
    }

    /// Why a queued job waits when the landing zone it names, or every one of its station, is
    /// not online; `None` when one is.
    fn offline(&self, station_id: Uuid, job: &Queued) -> Option<PendingReason> {
        let detail = match job.requested_lz_id {
            Some(lz_id) => match self.fleet.get(&lz_id) {
                Some(lz) if lz.connection.is_some() => return None,
                Some(lz) => format!("its landing zone {} is not online", lz.name),
                None => format!("its landing zone {lz_id} is gone"),
            },
            None if self.fleet.station(&station_id).is_some_and(|s| s.connected() > 0) => return None,
            None => "no landing zone of its station is online".to_owned(),
        };
        Some(pending(PendingKind::NoLandingZone, detail))
    }
}

/// What a pass does with a job it looks at.
enum Verdict {
    /// Start it on this LZ, or a gang on these (rank order).
    Place(Vec<Uuid>),
    /// Hold this LZ for it: nothing after it starts there in this pass.
    Hold(Uuid),
    /// Hold these LZs for a gang that waits for room on all of them: nothing after it starts
    /// there in this pass.
    HoldGang(Vec<Uuid>),
    /// Stop borrowed jobs to make room for it (within its project's nominal), and hold the LZ.
    Reclaim(Plan),
    /// It cannot start, nor hold an LZ; later jobs of its sub-queue may.
    PassOver,
    /// Nothing of its sub-queue starts in this pass (its user is at the limit, or nothing of the
    /// station is online).
    SkipQueue,
}

/// `why`, said of a job that left `lz_id`, naming the node where the job is a gang.
fn on_node(placed: &Placed, lz_id: Uuid, why: &str) -> String {
    match placed.part.as_ref().and_then(|part| part.lz_ids.iter().position(|id| *id == lz_id)) {
        Some(rank) => format!("node {rank}: {why}"),
        None => why.to_owned(),
    }
}

/// The retry policy of a job whose current attempt failed so, if it tries the job again.
fn retried(job: &Queued, failure: RetryOn) -> Option<RetryPolicy> {
    job.retry.as_deref().filter(|policy| policy.retries(job.attempt, failure)).cloned()
}

/// A pending reason.
fn pending(kind: PendingKind, detail: String) -> PendingReason {
    PendingReason { kind, detail }
}

/// The pending reason of a job that waits for `dep` to complete (or end) and `more` others.
/// The pending reason of a job its user holds.
fn held_reason(by: &str) -> PendingReason {
    pending(PendingKind::Held, format!("held by {by} until released"))
}

fn dependency_reason(dep: Uuid, must_complete: bool, more: usize) -> PendingReason {
    let end = if must_complete { "complete" } else { "end" };
    let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
    pending(PendingKind::Dependency, format!("waiting for job {dep} to {end}{more}"))
}

/// The pending reason of a job that earlier jobs come before (readers add how many).
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

/// `usage` with what the job cost by its station's settings ([`mission_api::energy`]): its
/// energy, carbon and money are reckoned as it ends, so that a later change of the settings (a
/// new tariff, a cleaner grid) leaves what ended before alone. Of what an agent said of them only
/// the energy it measured is kept, where it can be true.
fn with_footprint(
    energy: &HashMap<Uuid, StationEnergy>,
    station_id: Uuid,
    entry: &Queued,
    mut usage: JobUsage,
) -> JobUsage {
    let (cpus, memory_mb, gpus) = entry.total();
    // Each node of a gang is measured by its own agent: the CPU time and energy reported are one
    // node's, so the model counts every CPU the gang held as busy instead.
    let cpu_time = usage.cpu_time.filter(|_| !entry.is_gang());
    let measured = usage.energy_parts.as_ref().filter(|_| !entry.is_gang());
    let default = StationEnergy::default();
    let footprint = energy.get(&station_id).unwrap_or(&default).footprint(
        &Held { cpus, memory_mb, gpus },
        usage.wall_time,
        cpu_time,
        measured,
    );
    usage.energy_kwh = Some(footprint.energy_kwh);
    usage.co2e_g = Some(footprint.co2e_g);
    usage.cost = footprint.cost;
    usage.energy_parts = Some(footprint.parts);
    usage
}
