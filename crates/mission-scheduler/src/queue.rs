//! The scheduler's line of queued jobs, and what each of them waits for.
//!
//! [`Queue`] keeps every queued job as a [`Queued`] entry: its id and what placement needs (about
//! a hundred bytes; the job's row stays in the store and is read when the job is placed). The
//! jobs are filed in **sub-queues** keyed by [`QueueKey`] (station, project and user), each in
//! submission order. A placement pass looks only at the sub-queues'
//! heads, in the order [`Queue::next_head`] chooses, and goes down a sub-queue only as far as
//! placement gets; so its cost follows what it places, not how many jobs wait.
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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
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
        }
    }

    /// CPUs, megabytes and GPUs it asks for.
    pub(crate) fn shape(&self) -> Shape {
        (self.cpu_count, self.memory_amount, self.gpu_count)
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

/// One sub-queue: the jobs of one [`QueueKey`] that may be placed, by sequence number, and the
/// sequence numbers of all its queued jobs (held ones too) for positions.
struct SubQueue {
    key: QueueKey,
    runnable: ChunkMap<Queued>,
    line: RankSet,
}

/// A station's line: the heads of its sub-queues, every queued job's sequence number, and how
/// many jobs of each shape that name no landing zone wait (a gateway's demand).
#[derive(Default)]
struct StationLine {
    /// (sequence number of the head, sub-queue) for each sub-queue with a runnable job.
    heads: BTreeSet<(u64, u32)>,
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

/// The queued jobs, in sub-queues; see the module docs.
#[derive(Default)]
pub struct Queue {
    queues: Vec<SubQueue>,
    numbers: HashMap<QueueKey, u32>,
    /// The sub-queues of each (station, user), one per project they queue jobs in there.
    of_user: HashMap<(Uuid, Uuid), Vec<u32>>,
    /// Queued jobs per (station, project).
    per_project: HashMap<(Uuid, Uuid), u64>,
    places: HashMap<Uuid, Place>,
    /// Entries of held jobs.
    held: HashMap<Uuid, Queued>,
    stations: HashMap<Uuid, StationLine>,
    /// Queued jobs per landing zone they name.
    requested: HashMap<Uuid, u64>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("jobs", &self.places.len()).field("sub_queues", &self.queues.len()).finish()
    }
}

impl Queue {
    fn number(&mut self, key: QueueKey) -> u32 {
        if let Some(n) = self.numbers.get(&key) {
            return *n;
        }
        let n = self.queues.len() as u32;
        self.queues.push(SubQueue { key, runnable: ChunkMap::default(), line: RankSet::default() });
        self.numbers.insert(key, n);
        self.of_user.entry((key.station_id, key.user_id)).or_default().push(n);
        n
    }

    /// Puts a job in line at `seq` in the sub-queue `key`; `held` keeps it out of placement until
    /// [`Queue::let_go`].
    pub(crate) fn insert(&mut self, key: QueueKey, seq: u64, entry: Queued, held: bool) {
        let queue = self.number(key);
        let station = self.stations.entry(key.station_id).or_default();
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
        let old_head = sub.runnable.first().map(|(head, _)| head);
        sub.runnable.insert(seq, entry);
        if old_head.is_none_or(|head| seq < head) {
            let heads = &mut self.stations.get_mut(&sub.key.station_id).expect("filed on insert").heads;
            if let Some(head) = old_head {
                heads.remove(&(head, queue));
            }
            heads.insert((seq, queue));
        }
    }

    fn take_runnable(&mut self, queue: u32, seq: u64) -> Option<Queued> {
        let sub = &mut self.queues[queue as usize];
        let was_head = sub.runnable.first().is_some_and(|(head, _)| head == seq);
        let entry = sub.runnable.remove(seq)?;
        if was_head {
            let next = sub.runnable.first().map(|(head, _)| head);
            let heads = &mut self.stations.get_mut(&sub.key.station_id).expect("filed on insert").heads;
            heads.remove(&(seq, queue));
            if let Some(next) = next {
                heads.insert((next, queue));
            }
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

    /// The sub-queue whose head a pass over `station` looks at next, after the head `after`
    /// (`None`: from the start); `skip` tells sub-queues the pass is done with. First come, first
    /// served: the head submitted first. (Fair-share chooses by usage against share instead.)
    pub(crate) fn next_head(
        &self,
        station: Uuid,
        after: Option<(u64, u32)>,
        skip: impl Fn(u32) -> bool,
    ) -> Option<(u64, u32)> {
        let heads = &self.stations.get(&station)?.heads;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        heads.range((from, Bound::Unbounded)).find(|(_, queue)| !skip(*queue)).copied()
    }

    /// The runnable job of sub-queue `queue` at `seq`.
    pub(crate) fn runnable_at(&self, queue: u32, seq: u64) -> Option<&Queued> {
        self.queues[queue as usize].runnable.get(seq)
    }

    /// The first runnable job of sub-queue `queue` after `seq` (or from the start).
    pub(crate) fn next_in(&self, queue: u32, after: Option<u64>) -> Option<(u64, &Queued)> {
        self.queues[queue as usize].runnable.next_after(after)
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
    /// Records that `job_id` waits for `ok` to complete and `any` to end (both already rid of
    /// jobs that have); nothing when both are empty.
    pub fn wait(&mut self, job_id: Uuid, ok: HashSet<Uuid>, any: HashSet<Uuid>) {
        if ok.is_empty() && any.is_empty() {
            return;
        }
        for dep in ok.iter().chain(&any) {
            self.dependents.entry(*dep).or_default().push(job_id);
        }
        self.waits.insert(job_id, Waits { ok, any });
    }

    /// Whether a queued job still waits for another; the first it waits for, if it does, with
    /// whether that one must complete (rather than just end) and how many more there are.
    pub fn waiting_for(&self, job_id: Uuid) -> Option<(Uuid, bool, usize)> {
        let waits = self.waits.get(&job_id)?;
        let more = waits.ok.len() + waits.any.len() - 1;
        let first = |set: &HashSet<Uuid>| set.iter().min().copied();
        first(&waits.ok).map(|id| (id, true, more)).or_else(|| first(&waits.any).map(|id| (id, false, more)))
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
            waits.any.remove(&job_id);
            if waits.ok.is_empty() && waits.any.is_empty() {
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
        deps.wait(c, [a].into(), [b].into());
        deps.wait(d, [a].into(), HashSet::new());
        deps.wait(b, HashSet::new(), HashSet::new());
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
        deps.wait(f, [e].into(), HashSet::new());
        deps.wait(g, HashSet::new(), [e].into());
        let settled = deps.ended(e, JobStatus::Failed);
        assert!(
            settled.iter().any(|s| matches!(s, Settled::Failed(id, why) if *id == f && why.ends_with("ended failed")))
        );
        assert!(settled.iter().any(|s| matches!(s, Settled::Free(id) if *id == g)));
        assert_eq!(deps.waiting_for(g), None);
        assert!(deps.ended(e, JobStatus::Failed).is_empty(), "an end settles once");
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
        }
    }

    #[test]
    fn heads_follow_sub_queues_and_positions_count_held_jobs() {
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
        let first = queue.next_head(station, None, |_| false).unwrap();
        assert_eq!((first.0, queue.key(first.1)), (1, ann));
        let second = queue.next_head(station, Some(first), |_| false).unwrap();
        assert_eq!((second.0, queue.key(second.1)), (2, bob));
        assert_eq!(queue.next_in(first.1, Some(1)).map(|(seq, _)| seq), Some(4), "held jobs are passed over");
        assert_eq!(queue.position(Uuid::from_u128(13)), Some(QueuePosition { station: 4, own: 3 }));
        assert_eq!(queue.demand(station, |cpu, _, _| cpu <= 1), (3, 3));

        queue.remove(Uuid::from_u128(11)).unwrap();
        assert_eq!(queue.next_head(station, None, |_| false), Some((2, second.1)));
        assert_eq!(queue.next_head(station, Some((2, second.1)), |_| false), Some((4, first.1)));
        assert!(queue.let_go(Uuid::from_u128(12)));
        assert_eq!(queue.next_head(station, Some((2, second.1)), |_| false), Some((3, first.1)));
        assert_eq!(queue.position(Uuid::from_u128(13)), Some(QueuePosition { station: 3, own: 2 }));
        assert_eq!(queue.station_len(station), 3);
    }
}
