//! The scheduler's line of queued jobs, and what each of them waits for.
//!
//! [`Queue`] keeps every queued job as a [`Queued`] entry: its id and what placement needs (about
//! a hundred bytes; the job's row stays in the store and is read when the job is placed). The
//! jobs are filed in **sub-queues** keyed by [`QueueKey`] (station, project and user), each in
//! submission order. A placement pass looks only at one job of each sub-queue, its *candidate*
//! (the head, or where the pass got to), best first ([`Queue::next_candidate`]), and goes down a
//! sub-queue only as far as placement gets; so its cost follows what it places, not how many
//! jobs wait.
//!
//! Which candidate is best: first come, first served, the one submitted first; under fair-share,
//! the one of the project with the least usage against its share on the station, then of the user
//! with the least usage in that project, then the one submitted first ([`Order`]; the usage is
//! kept by `fair_share.rs`, which tells the queue as it changes). Per station the candidates are
//! filed twice over: per project by (user's usage, submission), and the projects by (usage against
//! share, best candidate). A change of usage moves one project, or one user's few sub-queues, in
//! those indexes, never the queue's jobs; so the best candidate is found in O(log projects), and
//! first come, first served is the same order with every usage at nothing.
//!
//! Jobs held back (waiting for another job, or for a retry's backoff) stay in line for their
//! positions but leave their sub-queue until they are let go, so no pass steps over them.
//!
//! Positions are counted when read ([`Queue::position`]): per station and per sub-queue a
//! [`RankSet`] of the queued jobs' sequence numbers counts those before a job in
//! O(jobs / 1024), without a walk of the line.
//!
//! [`Dependencies`] keeps, for the queued jobs that wait for others (`after_ok`, `after_any`),
//! the jobs they still wait for, and for each such job who waits for it, so that a job's end
//! settles its dependents at once: they may start, or (an `after_ok` job that did not complete)
//! they fail.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use mission_api::{Job, JobStatus, QueuePosition, RetryPolicy};
use uuid::Uuid;

use super::chunks::ChunkMap;

/// Which sub-queue a job waits in: one per station, project and user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct QueueKey {
    /// The station the job runs on.
    pub station_id: Uuid,
    /// The project it is charged to.
    pub project_id: Uuid,
    /// Whose job it is.
    pub user_id: Uuid,
}

impl QueueKey {
    /// The sub-queue of `job`.
    pub fn of(job: &Job) -> Self {
        Self { station_id: job.station_id, project_id: job.project_id, user_id: job.user_id }
    }
}

/// What placement needs of a queued job; the rest of its row stays in the store.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub job_id: Uuid,
    pub requested_lz_id: Option<Uuid>,
    pub cpu_count: u32,
    pub memory_amount: u64,
    pub gpu_count: u32,
    pub attempt: u32,
    /// Shared between the elements of an array (and jobs rebuilt with the same policy).
    pub retry: Option<Arc<RetryPolicy>>,
    /// Minutes it may run (what fair-share charges it as it starts).
    pub time_limit: Option<u32>,
    /// It ran before and went back in line (its room was reclaimed): its next run's output goes
    /// on after the earlier run's.
    pub ran: bool,
    /// It runs in a container image: only landing zones that take images may hold it.
    pub needs_image: bool,
    /// A batch job's directory: only landing zones that share it may hold it.
    pub workdir: Option<Arc<str>>,
    /// Megabytes of disk it needs free (a TES task's `disk_gb`), 0 for none.
    pub disk_mb: u64,
    /// How many landing zones it runs on at once (a gang where more than one), each holding
    /// `cpu_count`, `memory_amount` and `gpu_count`.
    pub nodes: u32,
    /// A gang that runs its command on its first node only (the others held for it), which
    /// ends as that one does; one that runs it on every node ends once all have.
    pub launch_first: bool,
    /// It goes back in line, as its next attempt, when its time limit, a reclaim or a node's
    /// failure ends it ([`mission_api::Job::requeue`]).
    pub requeue: bool,
}

impl Queued {
    /// The entry of `job`, its retry policy as given (see [`Policies`]).
    pub fn of(job: &Job, retry: Option<Arc<RetryPolicy>>) -> Self {
        Self {
            job_id: job.job_id,
            requested_lz_id: job.requested_lz_id,
            cpu_count: job.cpu_count,
            memory_amount: job.memory_amount,
            gpu_count: job.gpu_count,
            attempt: job.attempt,
            retry,
            time_limit: job.time_limit,
            ran: false,
            needs_image: job.image.is_some(),
            workdir: job.batch.as_ref().map(|batch| Arc::from(batch.workdir.as_str())),
            disk_mb: mission_api::tes::JobTask::disk_mb_of(job),
            nodes: job.nodes(),
            launch_first: job.gang.as_ref().is_some_and(|gang| gang.launch == mission_api::Launch::First),
            requeue: job.requeue,
        }
    }

    /// CPUs, megabytes and GPUs it asks for on each of its landing zones.
    pub(crate) fn shape(&self) -> Shape {
        (self.cpu_count, self.memory_amount, self.gpu_count)
    }

    /// CPUs, megabytes and GPUs it asks for on all its landing zones together: what project
    /// limits, budgets and fair-share count.
    pub(crate) fn total(&self) -> Shape {
        (self.cpu_count * self.nodes, self.memory_amount * u64::from(self.nodes), self.gpu_count * self.nodes)
    }

    /// Whether it runs on several landing zones at once.
    pub(crate) fn is_gang(&self) -> bool {
        self.nodes > 1
    }
}

/// Retry policies shared by the jobs that have the same one: an array's elements all carry
/// their request's, and a million copies would be most of the queue's memory.
#[derive(Default)]
pub(crate) struct Policies {
    /// By the policy's JSON (a policy has a float, so it is not `Hash` itself).
    known: HashMap<String, Arc<RetryPolicy>>,
}

impl Policies {
    /// The shared copy of `policy`.
    pub fn share(&mut self, policy: Option<&RetryPolicy>) -> Option<Arc<RetryPolicy>> {
        let policy = policy?;
        let json = serde_json::to_string(policy).expect("policies serialise");
        Some(self.known.entry(json).or_insert_with(|| Arc::new(policy.clone())).clone())
    }
}

/// CPUs, megabytes and GPUs a job asks for.
pub(crate) type Shape = (u32, u64, u32);

/// A set of sequence numbers that says how many of its members come before a number, in
/// O(members / 1024): members are counted per block of 1024 numbers, and within a block by bits.
#[derive(Default, Debug)]
pub(crate) struct RankSet {
    blocks: BTreeMap<u64, Block>,
    len: u64,
}

#[derive(Debug)]
struct Block {
    count: u32,
    bits: [u64; 16],
}

impl RankSet {
    const BLOCK: u64 = 1024;

    pub fn insert(&mut self, n: u64) {
        let block = self.blocks.entry(n / Self::BLOCK).or_insert(Block { count: 0, bits: [0; 16] });
        let (word, bit) = (((n % Self::BLOCK) / 64) as usize, n % 64);
        if block.bits[word] & (1 << bit) == 0 {
            block.bits[word] |= 1 << bit;
            block.count += 1;
            self.len += 1;
        }
    }

    pub fn remove(&mut self, n: u64) {
        let Some(block) = self.blocks.get_mut(&(n / Self::BLOCK)) else { return };
        let (word, bit) = (((n % Self::BLOCK) / 64) as usize, n % 64);
        if block.bits[word] & (1 << bit) != 0 {
            block.bits[word] &= !(1 << bit);
            block.count -= 1;
            self.len -= 1;
            if block.count == 0 {
                self.blocks.remove(&(n / Self::BLOCK));
            }
        }
    }

    /// How many members are less than `n`.
    pub fn rank(&self, n: u64) -> u64 {
        let block_of = n / Self::BLOCK;
        let before: u64 = self.blocks.range(..block_of).map(|(_, b)| u64::from(b.count)).sum();
        let within = self.blocks.get(&block_of).map_or(0, |b| {
            let offset = n % Self::BLOCK;
            let (word, bit) = ((offset / 64) as usize, offset % 64);
            let whole: u32 = b.bits[..word].iter().map(|w| w.count_ones()).sum();
            u64::from(whole) + u64::from((b.bits[word] & ((1u64 << bit) - 1)).count_ones())
        });
        before + within
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// The member with `k` members greater than it (0: the greatest); `None` when there are no
    /// more than `k`.
    pub fn nth_from_last(&self, k: u64) -> Option<u64> {
        let mut left = k;
        for (block_of, block) in self.blocks.iter().rev() {
            if left >= u64::from(block.count) {
                left -= u64::from(block.count);
                continue;
            }
            for (word, bits) in block.bits.iter().enumerate().rev() {
                if left >= u64::from(bits.count_ones()) {
                    left -= u64::from(bits.count_ones());
                    continue;
                }
                let mut bits = *bits;
                for _ in 0..left {
                    bits &= !(1 << (63 - bits.leading_zeros()));
                }
                return Some(block_of * Self::BLOCK + word as u64 * 64 + u64::from(63 - bits.leading_zeros()));
            }
        }
        None
    }
}

/// A usage as an order key: less comes first (every one is nothing when first come, first
/// served).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Rank(f64);

impl Eq for Rank {}

impl PartialOrd for Rank {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rank {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A sub-queue's candidate as its project's line files it: (its user's rank in the project, its
/// sequence number, the sub-queue).
type Candidate = (Rank, u64, u32);

/// One sub-queue: the jobs of one [`QueueKey`] that may be placed, by sequence number, and the
/// sequence numbers of all its queued jobs (held ones too) for positions.
struct SubQueue {
    key: QueueKey,
    runnable: ChunkMap<Queued>,
    line: RankSet,
    /// Where it stands in its project's line: its user's rank and the sequence number of its
    /// candidate (the first runnable job, or where a pass got to); `None` with nothing to place
    /// (or set aside by a pass).
    candidate: Option<(Rank, u64)>,
    /// Moved or set aside by the pass under way, which puts it back at its head when it ends.
    in_pass: bool,
}

/// A project's sub-queues on a station, by candidate, and its rank there.
#[derive(Default)]
struct ProjectLine {
    rank: Rank,
    candidates: BTreeSet<Candidate>,
}

impl ProjectLine {
    /// The project's entry in its station's line: its rank and best candidate.
    fn entry(&self, project: Uuid) -> Option<(Rank, Candidate, Uuid)> {
        self.candidates.first().map(|best| (self.rank, *best, project))
    }
}

/// A station's line: its projects' lines, every queued job's sequence number, and how many jobs
/// of each shape that name no landing zone wait (a gateway's demand).
#[derive(Default)]
struct StationLine {
    /// The projects with a candidate, best first: (rank, best candidate, project).
    projects: BTreeSet<(Rank, Candidate, Uuid)>,
    lines: HashMap<Uuid, ProjectLine>,
    line: RankSet,
    shapes: HashMap<Shape, u64>,
}

/// Where a queued job is.
#[derive(Debug, Clone, Copy)]
struct Place {
    queue: u32,
    seq: u64,
    /// Out of its sub-queue's runnable jobs, until let go.
    held: bool,
}

/// How the candidates of a station are ranked: by usage against share under fair-share; all
/// alike (so by submission alone) otherwise.
#[derive(Default)]
struct Order {
    fair_share: bool,
    /// Usage per project, as `fair_share.rs` counts it.
    projects: HashMap<Uuid, f64>,
    /// Usage per (project, user).
    members: HashMap<(Uuid, Uuid), f64>,
    /// Shares per (station, project) other than 1.
    shares: HashMap<(Uuid, Uuid), f64>,
}

impl Order {
    fn project_rank(&self, station: Uuid, project: Uuid) -> Rank {
        if !self.fair_share {
            return Rank::default();
        }
        let share = self.shares.get(&(station, project)).copied().unwrap_or(1.0);
        Rank(self.projects.get(&project).copied().unwrap_or(0.0) / share.max(f64::MIN_POSITIVE))
    }

    fn member_rank(&self, project: Uuid, user: Uuid) -> Rank {
        if !self.fair_share {
            return Rank::default();
        }
        Rank(self.members.get(&(project, user)).copied().unwrap_or(0.0))
    }
}

/// The queued jobs, in sub-queues; see the module docs.
#[derive(Default)]
pub struct Queue {
    queues: Vec<SubQueue>,
    numbers: HashMap<QueueKey, u32>,
    /// The sub-queues of each (station, user), one per project they queue jobs in there.
    of_user: HashMap<(Uuid, Uuid), Vec<u32>>,
    /// The sub-queues of each (project, user), one per station they queue jobs on.
    of_member: HashMap<(Uuid, Uuid), Vec<u32>>,
    /// The stations each project has a line on.
    lines_of: HashMap<Uuid, Vec<Uuid>>,
    /// Queued jobs per (station, project).
    per_project: HashMap<(Uuid, Uuid), u64>,
    places: HashMap<Uuid, Place>,
    /// Entries of held jobs.
    held: HashMap<Uuid, Queued>,
    stations: HashMap<Uuid, StationLine>,
    /// Queued jobs per landing zone they name.
    requested: HashMap<Uuid, u64>,
    order: Order,
    /// The sub-queues the pass under way moved or set aside.
    in_pass: Vec<u32>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("jobs", &self.places.len()).field("sub_queues", &self.queues.len()).finish()
    }
}

impl Queue {
    /// An empty queue; `fair_share` ranks its candidates by usage against share (see the module
    /// docs), else by submission alone.
    pub fn new(fair_share: bool) -> Self {
        Self { order: Order { fair_share, ..Order::default() }, ..Self::default() }
    }

    fn number(&mut self, key: QueueKey) -> u32 {
        if let Some(n) = self.numbers.get(&key) {
            return *n;
        }
        let n = self.queues.len() as u32;
        self.queues.push(SubQueue {
            key,
            runnable: ChunkMap::default(),
            line: RankSet::default(),
            candidate: None,
            in_pass: false,
        });
        self.numbers.insert(key, n);
        self.of_user.entry((key.station_id, key.user_id)).or_default().push(n);
        self.of_member.entry((key.project_id, key.user_id)).or_default().push(n);
        let station = self.stations.entry(key.station_id).or_default();
        if let std::collections::hash_map::Entry::Vacant(line) = station.lines.entry(key.project_id) {
            line.insert(ProjectLine {
                rank: self.order.project_rank(key.station_id, key.project_id),
                ..Default::default()
            });
            self.lines_of.entry(key.project_id).or_default().push(key.station_id);
        }
        n
    }

    /// Files sub-queue `queue`'s candidate at `seq` (`None`: takes it out of its project's line),
    /// its user's rank read anew, and moves its project in its station's line where its best
    /// candidate changed.
    fn set_candidate(&mut self, queue: u32, seq: Option<u64>) {
        let sub = &mut self.queues[queue as usize];
        let key = sub.key;
        let candidate = seq.map(|seq| (self.order.member_rank(key.project_id, key.user_id), seq));
        if sub.candidate == candidate {
            return;
        }
        let old = std::mem::replace(&mut sub.candidate, candidate);
        let station = self.stations.get_mut(&key.station_id).expect("filed when numbered");
        let line = station.lines.get_mut(&key.project_id).expect("filed when numbered");
        let before = line.entry(key.project_id);
        if let Some((rank, seq)) = old {
            line.candidates.remove(&(rank, seq, queue));
        }
        if let Some((rank, seq)) = candidate {
            line.candidates.insert((rank, seq, queue));
        }
        let after = line.entry(key.project_id);
        if before != after {
            if let Some(entry) = before {
                station.projects.remove(&entry);
            }
            if let Some(entry) = after {
                station.projects.insert(entry);
            }
        }
    }

    /// Ranks `project` on `station` anew (its usage or share changed).
    fn rank_project(&mut self, station: Uuid, project: Uuid) {
        let rank = self.order.project_rank(station, project);
        let Some(line) = self.stations.get_mut(&station) else { return };
        let Some(project_line) = line.lines.get_mut(&project) else { return };
        if project_line.rank == rank {
            return;
        }
        if let Some(entry) = project_line.entry(project) {
            line.projects.remove(&entry);
        }
        project_line.rank = rank;
        if let Some(entry) = project_line.entry(project) {
            line.projects.insert(entry);
        }
    }

    /// Takes in new usage of `project` and of `user` in it (fair-share's amounts), moving their
    /// candidates where their ranks change.
    pub(crate) fn set_usage(&mut self, project: Uuid, user: Uuid, of_project: f64, of_member: f64) {
        if !self.order.fair_share {
            return;
        }
        if self.order.members.insert((project, user), of_member) != Some(of_member) {
            for queue in self.of_member.get(&(project, user)).cloned().unwrap_or_default() {
                let seq = self.queues[queue as usize].candidate.map(|(_, seq)| seq);
                self.set_candidate(queue, seq);
            }
        }
        if self.order.projects.insert(project, of_project) != Some(of_project) {
            for station in self.lines_of.get(&project).cloned().unwrap_or_default() {
                self.rank_project(station, project);
            }
        }
    }

    /// Sets the share of `project` on `station` (`None`: the default, 1).
    pub(crate) fn set_share(&mut self, station: Uuid, project: Uuid, share: Option<f64>) {
        match share.filter(|s| *s != 1.0) {
            Some(share) => self.order.shares.insert((station, project), share),
            None => self.order.shares.remove(&(station, project)),
        };
        self.rank_project(station, project);
    }

    /// How many queued jobs on the station of `job_id` belong to projects ranked before its own
    /// (with less usage against their share): none when first come, first served.
    pub fn lighter_ahead(&self, job_id: Uuid) -> u64 {
        let Some(place) = self.places.get(&job_id) else { return 0 };
        let key = self.queues[place.queue as usize].key;
        let Some(station) = self.stations.get(&key.station_id) else { return 0 };
        let Some(own) = station.lines.get(&key.project_id) else { return 0 };
        station
            .lines
            .iter()
            .filter(|(project, line)| **project != key.project_id && line.rank < own.rank)
            .map(|(project, _)| self.project_len(key.station_id, *project))
            .sum()
    }

    /// Puts a job in line at `seq` in the sub-queue `key`; `held` keeps it out of placement until
    /// [`Queue::let_go`].
    pub(crate) fn insert(&mut self, key: QueueKey, seq: u64, entry: Queued, held: bool) {
        let queue = self.number(key);
        let station = self.stations.get_mut(&key.station_id).expect("filed when numbered");
        station.line.insert(seq);
        match entry.requested_lz_id {
            Some(lz) => *self.requested.entry(lz).or_default() += 1,
            None => *station.shapes.entry(entry.shape()).or_default() += 1,
        }
        self.queues[queue as usize].line.insert(seq);
        *self.per_project.entry((key.station_id, key.project_id)).or_default() += 1;
        self.places.insert(entry.job_id, Place { queue, seq, held });
        if held {
            self.held.insert(entry.job_id, entry);
        } else {
            self.add_runnable(queue, seq, entry);
        }
    }

    fn add_runnable(&mut self, queue: u32, seq: u64, entry: Queued) {
        let sub = &mut self.queues[queue as usize];
        sub.runnable.insert(seq, entry);
        if !sub.in_pass && sub.candidate.is_none_or(|(_, candidate)| seq < candidate) {
            self.set_candidate(queue, Some(seq));
        }
    }

    fn take_runnable(&mut self, queue: u32, seq: u64) -> Option<Queued> {
        let sub = &mut self.queues[queue as usize];
        let entry = sub.runnable.remove(seq)?;
        if sub.candidate.is_some_and(|(_, candidate)| candidate == seq) {
            let next = sub.runnable.next_after(Some(seq)).map(|(next, _)| next);
            self.set_candidate(queue, next);
        }
        Some(entry)
    }

    /// Takes a job out of line: its sub-queue, place and entry.
    pub(crate) fn remove(&mut self, job_id: Uuid) -> Option<(QueueKey, u64, Queued)> {
        let place = self.places.remove(&job_id)?;
        let entry = if place.held { self.held.remove(&job_id) } else { self.take_runnable(place.queue, place.seq) }?;
        let sub = &mut self.queues[place.queue as usize];
        sub.line.remove(place.seq);
        let key = sub.key;
        if let Some(n) = self.per_project.get_mut(&(key.station_id, key.project_id)) {
            *n -= 1;
            if *n == 0 {
                self.per_project.remove(&(key.station_id, key.project_id));
            }
        }
        let station = self.stations.get_mut(&key.station_id).expect("filed on insert");
        station.line.remove(place.seq);
        match entry.requested_lz_id {
            Some(lz) => {
                if let Some(n) = self.requested.get_mut(&lz) {
                    *n -= 1;
                    if *n == 0 {
                        self.requested.remove(&lz);
                    }
                }
            }
            None => {
                if let Some(n) = station.shapes.get_mut(&entry.shape()) {
                    *n -= 1;
                    if *n == 0 {
                        station.shapes.remove(&entry.shape());
                    }
                }
            }
        }
        Some((key, place.seq, entry))
    }

    /// Lets a held job be placed again; false when it is not held (or not queued).
    pub(crate) fn let_go(&mut self, job_id: Uuid) -> bool {
        let Some(place) = self.places.get(&job_id).copied().filter(|p| p.held) else { return false };
        let entry = self.held.remove(&job_id).expect("held jobs have entries");
        self.places.get_mut(&job_id).expect("looked up").held = false;
        self.add_runnable(place.queue, place.seq, entry);
        true
    }

    /// A queued job: its sub-queue, place and entry.
    pub(crate) fn get(&self, job_id: Uuid) -> Option<(QueueKey, u64, &Queued)> {
        let place = self.places.get(&job_id)?;
        let sub = &self.queues[place.queue as usize];
        let entry = if place.held { self.held.get(&job_id) } else { sub.runnable.get(place.seq) }?;
        Some((sub.key, place.seq, entry))
    }

    /// Where a queued job stands: how many queued jobs of its station, and of its user there
    /// (in every project's sub-queue), come before it, plus one.
    pub fn position(&self, job_id: Uuid) -> Option<QueuePosition> {
        let place = self.places.get(&job_id)?;
        let key = self.queues[place.queue as usize].key;
        let station = self.stations.get(&key.station_id)?;
        let own: u64 = self.of_user[&(key.station_id, key.user_id)]
            .iter()
            .map(|q| self.queues[*q as usize].line.rank(place.seq))
            .sum();
        Some(QueuePosition { station: station.line.rank(place.seq) + 1, own: own + 1 })
    }

    /// How many jobs of `project` are queued on `station`.
    pub(crate) fn project_len(&self, station: Uuid, project: Uuid) -> u64 {
        self.per_project.get(&(station, project)).copied().unwrap_or(0)
    }

    /// How many jobs are queued per (station, project).
    pub(crate) fn project_counts(&self) -> impl Iterator<Item = ((Uuid, Uuid), u64)> + '_ {
        self.per_project.iter().map(|(key, n)| (*key, *n))
    }

    /// How many jobs of `project` are queued, per station.
    pub(crate) fn project_lens(&self, project: Uuid) -> impl Iterator<Item = (Uuid, u64)> + '_ {
        self.per_project.iter().filter(move |((_, p), _)| *p == project).map(|((station, _), n)| (*station, *n))
    }

    /// How many jobs wait on `stations` (on all, when empty), of `user` (anyone's, when `None`):
    /// summed over the lines they stand in, not counted one by one.
    pub fn count(&self, stations: &[Uuid], user: Option<Uuid>) -> u64 {
        let on = |station: &Uuid| stations.is_empty() || stations.contains(station);
        match user {
            None => self.stations.iter().filter(|(id, _)| on(id)).map(|(_, line)| line.line.len()).sum(),
            Some(user) => {
                let theirs = self.queues.iter().filter(|q| q.key.user_id == user && on(&q.key.station_id));
                theirs.map(|q| q.line.len()).sum()
            }
        }
    }

    /// Where a page of the jobs waiting on `stations` (on all, when empty) of `user` (anyone's,
    /// when `None`), newest first, starts once the `skip` newest are passed: the sequence number
    /// of its first job, `Some(0)` when no more wait. Answered where one line holds them all (one
    /// station; one user's on one station), `None` otherwise.
    pub fn page_start(&self, stations: &[Uuid], user: Option<Uuid>, skip: u64) -> Option<u64> {
        let station = match stations {
            [one] => *one,
            [] if self.stations.len() == 1 => *self.stations.keys().next()?,
            _ => return None,
        };
        let line = match user {
            None => &self.stations.get(&station)?.line,
            // One line holds them where the user queues in one project there.
            Some(user_id) => match self.of_user.get(&(station, user_id))?.as_slice() {
                [one] => &self.queues[*one as usize].line,
                _ => return None,
            },
        };
        Some(line.nth_from_last(skip).unwrap_or(0))
    }

    /// The best candidate of `station` (see the module docs): its sequence number and sub-queue.
    pub(crate) fn next_candidate(&self, station: Uuid) -> Option<(u64, u32)> {
        let (_, (_, seq, queue), _) = self.stations.get(&station)?.projects.first()?;
        Some((*seq, *queue))
    }

    /// The pass under way is done with the candidate of sub-queue `queue` at `seq` without
    /// taking it: the next runnable job after it is the sub-queue's candidate until the pass ends.
    pub(crate) fn pass_over(&mut self, queue: u32, seq: u64) {
        self.enter_pass(queue);
        let next = self.queues[queue as usize].runnable.next_after(Some(seq)).map(|(next, _)| next);
        self.set_candidate(queue, next);
    }

    /// The pass under way looks at nothing more of sub-queue `queue`.
    pub(crate) fn set_aside(&mut self, queue: u32) {
        self.enter_pass(queue);
        self.set_candidate(queue, None);
    }

    fn enter_pass(&mut self, queue: u32) {
        let sub = &mut self.queues[queue as usize];
        if !sub.in_pass {
            sub.in_pass = true;
            self.in_pass.push(queue);
        }
    }

    /// The pass under way ended: the sub-queues it moved are back at their heads.
    pub(crate) fn end_pass(&mut self) {
        for queue in std::mem::take(&mut self.in_pass) {
            let sub = &mut self.queues[queue as usize];
            sub.in_pass = false;
            let head = sub.runnable.first().map(|(head, _)| head);
            self.set_candidate(queue, head);
        }
    }

    /// The runnable job of sub-queue `queue` at `seq`.
    pub(crate) fn runnable_at(&self, queue: u32, seq: u64) -> Option<&Queued> {
        self.queues[queue as usize].runnable.get(seq)
    }

    /// The key of sub-queue `queue`.
    pub(crate) fn key(&self, queue: u32) -> QueueKey {
        self.queues[queue as usize].key
    }

    /// How many jobs are queued on `station`.
    pub(crate) fn station_len(&self, station: Uuid) -> u64 {
        self.stations.get(&station).map_or(0, |s| s.line.len())
    }

    /// How many queued jobs name the landing zone `lz_id`.
    pub(crate) fn requesting(&self, lz_id: Uuid) -> u64 {
        self.requested.get(&lz_id).copied().unwrap_or(0)
    }

    /// How many queued jobs of `station` that name no landing zone `fits` takes, and their CPUs.
    pub(crate) fn demand(&self, station: Uuid, fits: impl Fn(u32, u64, u32) -> bool) -> (u64, u64) {
        let Some(line) = self.stations.get(&station) else { return (0, 0) };
        line.shapes
            .iter()
            .filter(|((cpu, memory, gpu), _)| fits(*cpu, *memory, *gpu))
            .fold((0, 0), |(jobs, cpus), ((cpu, _, _), n)| (jobs + n, cpus + n * u64::from(*cpu)))
    }
}

/// What one queued job still waits for.
struct Waits {
    /// Jobs that must complete.
    ok: HashSet<Uuid>,
    /// Jobs that must end, however.
    any: HashSet<Uuid>,
    /// Jobs that must end without completing.
    not_ok: HashSet<Uuid>,
}

/// How a job's end bears on one that waited for it.
pub(super) enum Settled {
    /// A job that waited for it waits for nothing more and may be placed.
    Free(Uuid),
    /// It waited for the job to complete, which ended otherwise: it fails, for this reason.
    Failed(Uuid, String),
}

/// The queued jobs that wait for others.
#[derive(Default)]
pub(super) struct Dependencies {
    waits: HashMap<Uuid, Waits>,
    /// For each job waited for, who waits for it (entries of jobs that ended since are skipped).
    dependents: HashMap<Uuid, Vec<Uuid>>,
}

impl Dependencies {
    /// Records that `job_id` waits for `ok` to complete, `any` to end and `not_ok` to end
    /// without completing (all already rid of jobs that have ended); nothing when all are empty.
    pub fn wait(&mut self, job_id: Uuid, ok: HashSet<Uuid>, any: HashSet<Uuid>, not_ok: HashSet<Uuid>) {
        if ok.is_empty() && any.is_empty() && not_ok.is_empty() {
            return;
        }
        for dep in ok.iter().chain(&any).chain(&not_ok) {
            self.dependents.entry(*dep).or_default().push(job_id);
        }
        self.waits.insert(job_id, Waits { ok, any, not_ok });
    }

    /// Whether a queued job still waits for another; the first it waits for, if it does, with
    /// whether that one must complete (rather than just end) and how many more there are.
    pub fn waiting_for(&self, job_id: Uuid) -> Option<(Uuid, bool, usize)> {
        let waits = self.waits.get(&job_id)?;
        let more = waits.ok.len() + waits.any.len() + waits.not_ok.len() - 1;
        let first = |set: &HashSet<Uuid>| set.iter().min().copied();
        first(&waits.ok)
            .map(|id| (id, true, more))
            .or_else(|| first(&waits.any).or_else(|| first(&waits.not_ok)).map(|id| (id, false, more)))
    }

    /// A job ended `status`: what that settles for those that waited for it. The job itself no
    /// longer waits for anything (it has left the queue).
    pub fn ended(&mut self, job_id: Uuid, status: JobStatus) -> Vec<Settled> {
        self.waits.remove(&job_id);
        let mut settled = Vec::new();
        for waiter in self.dependents.remove(&job_id).unwrap_or_default() {
            let Some(waits) = self.waits.get_mut(&waiter) else { continue };
            if waits.ok.remove(&job_id) && status != JobStatus::Completed {
                self.waits.remove(&waiter);
                settled.push(Settled::Failed(waiter, format!("the job it waited for, {job_id}, ended {status}")));
                continue;
            }
            if waits.not_ok.remove(&job_id) && status == JobStatus::Completed {
                self.waits.remove(&waiter);
                let why = format!("the job it waited for to end without completing, {job_id}, completed");
                settled.push(Settled::Failed(waiter, why));
                continue;
            }
            waits.any.remove(&job_id);
            if waits.ok.is_empty() && waits.any.is_empty() && waits.not_ok.is_empty() {
                self.waits.remove(&waiter);
                settled.push(Settled::Free(waiter));
            }
        }
        settled
    }

    /// Forgets everything (the jobs are being reloaded).
    pub fn clear(&mut self) {
        self.waits.clear();
        self.dependents.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_end_frees_or_fails_who_waited_for_it() {
        let [a, b, c, d] = [1, 2, 3, 4].map(Uuid::from_u128);
        let mut deps = Dependencies::default();
        deps.wait(c, [a].into(), [b].into(), HashSet::new());
        deps.wait(d, [a].into(), HashSet::new(), HashSet::new());
        deps.wait(b, HashSet::new(), HashSet::new(), HashSet::new());
        assert_eq!(deps.waiting_for(b), None, "waiting for nothing is not waiting");
        assert_eq!(deps.waiting_for(c), Some((a, true, 1)));
        // b ends stopped: c waited for it to end, however; it still waits for a.
        assert!(deps.ended(b, JobStatus::Stopped).is_empty());
        assert_eq!(deps.waiting_for(c), Some((a, true, 0)));
        let settled = deps.ended(a, JobStatus::Completed);
        assert_eq!(settled.iter().filter(|s| matches!(s, Settled::Free(_))).count(), 2, "c and d are free");
        assert_eq!((deps.waiting_for(c), deps.waiting_for(d)), (None, None));

        // A failed dependency fails its after_ok waiter once, and its after_any waiter goes on.
        let [e, f, g] = [5, 6, 7].map(Uuid::from_u128);
        deps.wait(f, [e].into(), HashSet::new(), HashSet::new());
        deps.wait(g, HashSet::new(), [e].into(), HashSet::new());
        let settled = deps.ended(e, JobStatus::Failed);
        assert!(
            settled.iter().any(|s| matches!(s, Settled::Failed(id, why) if *id == f && why.ends_with("ended failed")))
        );
        assert!(settled.iter().any(|s| matches!(s, Settled::Free(id) if *id == g)));
        assert_eq!(deps.waiting_for(g), None);
        assert!(deps.ended(e, JobStatus::Failed).is_empty(), "an end settles once");

        // after_not_ok: a failure frees the waiter, a completion fails it.
        let [h, i, j, k] = [8, 9, 10, 11].map(Uuid::from_u128);
        deps.wait(i, HashSet::new(), HashSet::new(), [h].into());
        deps.wait(k, HashSet::new(), HashSet::new(), [j].into());
        assert_eq!(deps.waiting_for(i), Some((h, false, 0)));
        assert!(matches!(deps.ended(h, JobStatus::Failed)[..], [Settled::Free(id)] if id == i));
        let settled = deps.ended(j, JobStatus::Completed);
        assert!(matches!(&settled[..], [Settled::Failed(id, why)] if *id == k && why.ends_with("completed")));
    }

    #[test]
    fn a_rank_set_counts_members_before_a_number_across_blocks() {
        let mut set = RankSet::default();
        for n in (0..5000).step_by(3) {
            set.insert(n);
        }
        set.insert(3); // already there
        assert_eq!(set.len(), 1667);
        for probe in [0, 1, 3, 4, 1023, 1024, 1025, 2048, 4999, 5000, 1_000_000] {
            let expected = (0..5000).step_by(3).filter(|n| *n < probe).count() as u64;
            assert_eq!(set.rank(probe), expected, "rank of {probe}");
        }
        for n in (0..5000).step_by(6) {
            set.remove(n);
        }
        set.remove(1); // never there
        assert_eq!(set.rank(5000), (0..5000).step_by(3).filter(|n| n % 6 != 0).count() as u64);
        assert_eq!(set.len(), set.rank(u64::MAX));
        // Counted from the greatest down: where a page of the newest starts.
        let mut members: Vec<u64> = (0..5000).step_by(3).filter(|n| n % 6 != 0).collect();
        members.reverse();
        for (k, member) in members.iter().enumerate() {
            assert_eq!(set.nth_from_last(k as u64), Some(*member), "{k} from the last");
        }
        assert_eq!(set.nth_from_last(members.len() as u64), None);
    }

    fn entry(id: u128, cpus: u32) -> Queued {
        Queued {
            job_id: Uuid::from_u128(id),
            requested_lz_id: None,
            cpu_count: cpus,
            memory_amount: 1,
            gpu_count: 0,
            attempt: 1,
            retry: None,
            time_limit: None,
            ran: false,
            needs_image: false,
            workdir: None,
            disk_mb: 0,
            nodes: 1,
            launch_first: false,
            requeue: false,
        }
    }

    #[test]
    fn candidates_follow_sub_queues_and_positions_count_held_jobs() {
        let station = Uuid::from_u128(100);
        let (ann, bob) = (
            QueueKey { station_id: station, project_id: Uuid::from_u128(1), user_id: Uuid::from_u128(1) },
            QueueKey { station_id: station, project_id: Uuid::from_u128(2), user_id: Uuid::from_u128(2) },
        );
        let mut queue = Queue::default();
        queue.insert(ann, 1, entry(11, 1), false);
        queue.insert(bob, 2, entry(21, 1), false);
        queue.insert(ann, 3, entry(12, 2), true);
        queue.insert(ann, 4, entry(13, 1), false);
        let first = queue.next_candidate(station).unwrap();
        assert_eq!((first.0, queue.key(first.1)), (1, ann));
        queue.pass_over(first.1, first.0);
        let second = queue.next_candidate(station).unwrap();
        assert_eq!((second.0, queue.key(second.1)), (2, bob));
        queue.set_aside(second.1);
        assert_eq!(queue.next_candidate(station), Some((4, first.1)), "held jobs are passed over");
        queue.pass_over(first.1, 4);
        assert_eq!(queue.next_candidate(station), None);
        queue.end_pass();
        assert_eq!(queue.next_candidate(station), Some(first), "a pass's moves end with it");
        assert_eq!(queue.position(Uuid::from_u128(13)), Some(QueuePosition { station: 4, own: 3 }));
        assert_eq!(queue.demand(station, |cpu, _, _| cpu <= 1), (3, 3));

        queue.remove(Uuid::from_u128(11)).unwrap();
        assert_eq!(queue.next_candidate(station), Some((2, second.1)));
        queue.pass_over(second.1, 2);
        assert_eq!(queue.next_candidate(station), Some((4, first.1)));
        queue.end_pass();
        assert!(queue.let_go(Uuid::from_u128(12)));
        queue.set_aside(second.1);
        assert_eq!(queue.next_candidate(station), Some((3, first.1)));
        queue.end_pass();
        assert_eq!(queue.position(Uuid::from_u128(13)), Some(QueuePosition { station: 3, own: 2 }));
        assert_eq!(queue.station_len(station), 3);
    }

    #[test]
    fn fair_share_ranks_projects_by_usage_against_share_then_users() {
        let station = Uuid::from_u128(100);
        let key = |project: u128, user: u128| QueueKey {
            station_id: station,
            project_id: Uuid::from_u128(project),
            user_id: Uuid::from_u128(user),
        };
        let (heavy, light) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut queue = Queue::new(true);
        // Project 1 queued first, two users; project 2 later.
        queue.insert(key(1, 10), 1, entry(1, 1), false);
        queue.insert(key(1, 11), 2, entry(2, 1), false);
        queue.insert(key(2, 20), 3, entry(3, 1), false);
        queue.insert(key(1, 10), 4, entry(4, 1), false);
        let at = |queue: &Queue| queue.next_candidate(station).map(|(seq, _)| seq);
        assert_eq!(at(&queue), Some(1), "without usage, first come first served");

        queue.set_usage(heavy, Uuid::from_u128(10), 100.0, 100.0);
        assert_eq!(at(&queue), Some(3), "the project with less usage first");
        assert_eq!(queue.lighter_ahead(Uuid::from_u128(4)), 1);
        assert_eq!(queue.lighter_ahead(Uuid::from_u128(3)), 0);

        // Twice the usage, but four times the share: project 1 is ahead again, and within it the
        // user without usage.
        queue.set_usage(light, Uuid::from_u128(20), 50.0, 50.0);
        queue.set_share(station, heavy, Some(4.0));
        assert_eq!(at(&queue), Some(2));
        queue.set_usage(heavy, Uuid::from_u128(11), 160.0, 60.0);
        assert_eq!(at(&queue), Some(2), "user 11's 60 is less than user 10's 100");
        queue.set_usage(heavy, Uuid::from_u128(11), 300.0, 200.0);
        assert_eq!(at(&queue), Some(3), "300 against a share of 4 is more than 50 against 1");
        queue.set_usage(light, Uuid::from_u128(20), 400.0, 400.0);
        assert_eq!(at(&queue), Some(1), "user 10's 100 is less than user 11's 200");
        // A pass that takes project 1's candidate, then sees its usage grow, turns to project 2.
        let (seq, number) = queue.next_candidate(station).unwrap();
        queue.remove(queue.runnable_at(number, seq).unwrap().job_id);
        queue.set_usage(heavy, Uuid::from_u128(10), 2000.0, 1800.0);
        assert_eq!(at(&queue), Some(3));
        queue.end_pass();
        assert_eq!(queue.project_len(station, heavy), 2);
    }
}
