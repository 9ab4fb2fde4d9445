//! The landing zones as the scheduler sees them: what each offers and holds, its connection and
//! lease, and per station an index of the connected ones by free room, so that a placement finds
//! the best fit (or the LZ to hold for a large job) without a look at every landing zone.
//!
//! Whatever changes an LZ's room or connection goes through [`Fleet`] (`hold`, `release`,
//! `update`, `insert`, `remove`), which keeps the index, the job → LZ map, the per-user and
//! per-project counts of placed jobs and fair-share's usage ([`Usage`]: charged as a job is held,
//! settled as it is released) current.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use mission_api::lz::Order;
use mission_api::{JobStatus, PendingReason, Resources};
use tokio::time::Instant;
use uuid::Uuid;

use super::fair_share::Usage;
use super::queue::{QueueKey, Queued, Shape};
use super::{SessionId, Sessions};

/// A job an LZ holds: its queue entry (what it asks for) and how far it got.
#[derive(Clone)]
pub(super) struct Placed {
    pub entry: Queued,
    pub key: QueueKey,
    pub seq: u64,
    pub status: JobStatus,
    pub gpu_indices: Vec<u32>,
    /// The last reason it was given (why it failed, or a batch system's words once running).
    pub reason: Option<String>,
    /// Why it waits in a batch system's queue, while it does.
    pub pending_reason: Option<PendingReason>,
    /// A user stopped it: when it ends, it ends `stopped`.
    pub stop_requested: bool,
    /// It is being stopped to go back in line (its borrowed room is reclaimed, see `reclaim.rs`,
    /// or its user asked for a requeue): when it ends without completing, it goes back in line,
    /// told this.
    pub requeue_reason: Option<String>,
    /// Which part of a job on several landing zones (a gang) this is; none for a job of one.
    pub part: Option<GangPart>,
    /// A gang's part left behind when the gang ended (another node failed, or was lost) while it
    /// still ran: it holds its room, and no new part of the job comes to its LZ, until its agent
    /// reports its end (or its lease runs out). Nothing else of the job is its.
    pub orphan: bool,
}

impl Placed {
    /// Whether it is the part of its job that counts for it: the job itself, or a gang's rank 0
    /// (whose exit is the job's, and which carries its charges and counts).
    pub fn leads(&self) -> bool {
        self.part.as_ref().is_none_or(|part| part.rank == 0)
    }

    /// The landing zones of its job other than `lz_id`: a gang's other nodes, none otherwise.
    pub fn other_nodes(&self, lz_id: Uuid) -> impl Iterator<Item = Uuid> + '_ {
        self.part.iter().flat_map(|part| part.lz_ids.iter()).copied().filter(move |id| *id != lz_id)
    }
}

/// One landing zone's part of a job on several (a gang): each node holds a [`Placed`] of its
/// own, with the job's queue entry, so that room, reports and leases work per node; rank 0's
/// stands for the job in the counts, charges and the job → LZ map.
#[derive(Clone)]
pub(super) struct GangPart {
    pub rank: u32,
    /// The gang's landing zones, in rank order.
    pub lz_ids: Arc<[Uuid]>,
}

/// An agent's order stream; dropping it ends the stream (the agent then connects again).
pub(super) struct Connection {
    pub id: SessionId,
    pub sessions: Arc<Sessions>,
}

impl Connection {
    pub fn send(&self, order: Order) {
        self.sessions.deliver(self.id, order);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.sessions.end(self.id);
    }
}

pub(super) struct LzState {
    pub station_id: Uuid,
    pub name: String,
    /// What the agent advertised when it last connected; `None` until it first did.
    pub capacity: Option<Resources>,
    gpus: Vec<u32>,
    pub free_cpu: i64,
    pub free_memory: i64,
    pub free_gpus: BTreeSet<u32>,
    pub connection: Option<Connection>,
    /// When the lease runs out; `None` once it did (until the agent connects again).
    pub lease_until: Option<Instant>,
    pub jobs: HashMap<Uuid, Placed>,
    /// A gateway into a batch system takes this many jobs at once, each within `capacity`,
    /// whatever else it holds (its batch system queues them).
    pub max_jobs: Option<u32>,
    /// It runs jobs in container images.
    pub images: bool,
    /// The directories it runs batch jobs in ([`mission_api::lz::Hello::shared_paths`]).
    pub shared_paths: Vec<String>,
    /// Megabytes free for jobs' files as its agent last connected; `None` where unknown.
    pub disk_mb: Option<u64>,
    /// The address a gang's ranks reach it at, as its agent said; `None`: its name.
    pub node_address: Option<String>,
}

impl LzState {
    /// An LZ offering `capacity` (unknown until its agent first connects) with the GPUs `gpus`.
    pub fn new(station_id: Uuid, name: String, capacity: Option<Resources>, gpus: Vec<u32>) -> Self {
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
            images: false,
            shared_paths: Vec::new(),
            disk_mb: None,
            node_address: None,
        }
    }

    /// The address a gang's ranks reach it at.
    pub fn node_address(&self) -> String {
        self.node_address.clone().unwrap_or_else(|| self.name.clone())
    }

    /// Counts a placed job (with its `gpu_indices`) against the free room (a gateway counts jobs
    /// instead).
    fn take_room(&mut self, placed: &Placed) {
        if self.max_jobs.is_none() {
            self.free_cpu -= i64::from(placed.entry.cpu_count);
            self.free_memory -= placed.entry.memory_amount as i64;
            for g in &placed.gpu_indices {
                self.free_gpus.remove(g);
            }
        }
    }

    pub fn fits_now(&self, job: &Queued) -> bool {
        if let Some(max) = self.max_jobs {
            return self.jobs.len() < max as usize && self.could_hold(job);
        }
        self.free_cpu >= i64::from(job.cpu_count)
            && self.free_memory >= job.memory_amount as i64
            && self.free_gpus.len() >= job.gpu_count as usize
            && self.takes(job)
            // An earlier attempt's part still stopping here.
            && !self.jobs.contains_key(&job.job_id)
    }

    /// Whether it could ever run `job`: large enough, taking images where the job runs in one,
    /// sharing a batch job's directory.
    pub fn could_hold(&self, job: &Queued) -> bool {
        self.takes(job) && self.could_hold_shape(job.cpu_count, job.memory_amount, job.gpu_count)
    }

    /// Whether it runs jobs of `job`'s kind: in an image, in a batch job's directory, with the
    /// disk it needs.
    fn takes(&self, job: &Queued) -> bool {
        (self.images || !job.needs_image)
            && job.workdir.as_deref().is_none_or(|dir| self.shares(dir))
            && self.has_disk(job.disk_mb)
    }

    /// Whether it has `mb` megabytes free for a job's files, as far as it said (an LZ that did
    /// not say is not ruled out).
    pub fn has_disk(&self, mb: u64) -> bool {
        mb == 0 || self.disk_mb.is_none_or(|free| free >= mb)
    }

    /// Whether it runs batch jobs submitted in `dir`.
    pub fn shares(&self, dir: &str) -> bool {
        mission_api::lz::shares(&self.shared_paths, dir)
    }

    pub fn could_hold_shape(&self, cpu: u32, memory: u64, gpu: u32) -> bool {
        self.capacity.is_some_and(|c| c.cpu_count >= cpu && c.memory_amount >= memory && c.gpu_count >= gpu)
    }

    /// Whether a job could start here now, were it small enough: free CPUs and memory left, or
    /// (a gateway) a free slot.
    fn has_room(&self) -> bool {
        match self.max_jobs {
            Some(max) => self.jobs.len() < max as usize,
            None => self.free_cpu >= 1 && self.free_memory >= 1,
        }
    }

    /// The key of this LZ in its station's index by room.
    fn room_key(&self, id: Uuid) -> (i64, i64, Uuid) {
        (self.free_cpu, self.free_memory, id)
    }
}

/// A station's landing zones, and the connected ones by free room.
#[derive(Default)]
pub(super) struct StationLzs {
    /// Every LZ of the station.
    pub all: BTreeSet<Uuid>,
    /// The connected LZs that count resources, by (free CPUs, free memory, id).
    pub by_room: BTreeSet<(i64, i64, Uuid)>,
    /// The connected gateways (they count jobs instead).
    pub gateways: BTreeSet<Uuid>,
    /// Connected LZs out of `by_room` while a pass holds them ([`Fleet::set_aside`]).
    aside: usize,
    /// How many of its LZs offer each capacity, as (GPUs, CPUs, memory): whether a job could
    /// ever run on the station is a look at these few, not at every LZ.
    sizes: BTreeMap<(u32, u32, u64), usize>,
    /// How many of its LZs never connected (of any size, as far as anyone knows).
    unknown_sizes: usize,
}

impl StationLzs {
    pub fn connected(&self) -> usize {
        self.by_room.len() + self.gateways.len() + self.aside
    }

    /// Whether some LZ of the station could ever hold a job of this shape; true while an LZ's
    /// size is unknown (only known sizes can rule a job out).
    pub fn could_hold_shape(&self, cpu: u32, memory: u64, gpu: u32) -> bool {
        self.unknown_sizes > 0 || self.sizes.keys().any(|&(g, c, m)| g >= gpu && c >= cpu && m >= memory)
    }

    fn count_size(&mut self, capacity: Option<Resources>, added: bool) {
        let Some(c) = capacity else {
            self.unknown_sizes = if added { self.unknown_sizes + 1 } else { self.unknown_sizes - 1 };
            return;
        };
        let key = (c.gpu_count, c.cpu_count, c.memory_amount);
        let n = self.sizes.entry(key).or_default();
        *n = if added { *n + 1 } else { *n - 1 };
        if *n == 0 {
            self.sizes.remove(&key);
        }
    }
}

/// The landing zones; see the module docs.
pub(super) struct Fleet {
    lzs: HashMap<Uuid, LzState>,
    stations: HashMap<Uuid, StationLzs>,
    /// Which LZ holds each placed job.
    placed_on: HashMap<Uuid, Uuid>,
    /// How many placed jobs each user has.
    per_user: HashMap<Uuid, u32>,
    /// What each project's placed jobs hold on each station, by (station, project).
    per_project: HashMap<(Uuid, Uuid), Held>,
    /// What the projects and their users used, decayed, and the placed jobs' charges.
    pub usage: Usage,
}

/// What a project's placed jobs hold on a station.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    /// Placed jobs, not ended.
    pub jobs: u32,
    /// CPUs they asked for.
    pub cpus: u64,
    /// Megabytes they asked for.
    pub memory: u64,
    /// GPUs they asked for.
    pub gpus: u64,
}

impl Held {
    /// Counts a placed job asking for `(cpus, memory, gpus)` in (`sign` 1) or out (-1).
    fn count(&mut self, (cpus, memory, gpus): Shape, sign: i64) {
        let add = |n: &mut u64, by: u64| *n = n.checked_add_signed(sign * by as i64).expect("counts stay whole");
        self.jobs = self.jobs.checked_add_signed(sign as i32).expect("counts stay whole");
        add(&mut self.cpus, u64::from(cpus));
        add(&mut self.memory, memory);
        add(&mut self.gpus, u64::from(gpus));
    }
}

impl Fleet {
    /// No landing zones yet; placed jobs are charged to `usage`.
    pub fn new(usage: Usage) -> Self {
        Self {
            lzs: HashMap::new(),
            stations: HashMap::new(),
            placed_on: HashMap::new(),
            per_user: HashMap::new(),
            per_project: HashMap::new(),
            usage,
        }
    }

    pub fn get(&self, lz_id: &Uuid) -> Option<&LzState> {
        self.lzs.get(lz_id)
    }

    /// An LZ, for changes that touch neither its room nor its connection (a placed job's status).
    pub fn get_quiet_mut(&mut self, lz_id: &Uuid) -> Option<&mut LzState> {
        self.lzs.get_mut(lz_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Uuid, &LzState)> {
        self.lzs.iter()
    }

    pub fn station(&self, station_id: &Uuid) -> Option<&StationLzs> {
        self.stations.get(station_id)
    }

    /// The LZs of a station.
    pub fn of_station(&self, station_id: Uuid) -> impl Iterator<Item = (Uuid, &LzState)> {
        let ids = self.stations.get(&station_id).map(|s| s.all.iter()).into_iter().flatten();
        ids.filter_map(|id| self.lzs.get(id).map(|lz| (*id, lz)))
    }

    /// The LZ holding a placed job.
    pub fn holder(&self, job_id: &Uuid) -> Option<Uuid> {
        self.placed_on.get(job_id).copied()
    }

    /// A placed job.
    pub fn placed(&self, job_id: &Uuid) -> Option<&Placed> {
        self.lzs.get(self.placed_on.get(job_id)?)?.jobs.get(job_id)
    }

    /// How many placed jobs `user_id` has.
    pub fn placed_of(&self, user_id: &Uuid) -> u32 {
        self.per_user.get(user_id).copied().unwrap_or(0)
    }

    /// What `project`'s placed jobs hold on `station`.
    pub fn held_by(&self, station: Uuid, project: Uuid) -> Held {
        self.per_project.get(&(station, project)).copied().unwrap_or_default()
    }

    /// What every project's placed jobs hold, per (station, project).
    pub fn held_by_projects(&self) -> impl Iterator<Item = ((Uuid, Uuid), Held)> + '_ {
        self.per_project.iter().map(|(key, held)| (*key, *held))
    }

    /// What `project`'s placed jobs hold, per station.
    pub fn held_by_project(&self, project: Uuid) -> impl Iterator<Item = (Uuid, Held)> + '_ {
        self.per_project.iter().filter(move |((_, p), _)| *p == project).map(|((station, _), held)| (*station, *held))
    }

    fn unlist(&mut self, lz_id: Uuid) {
        let Some(lz) = self.lzs.get(&lz_id) else { return };
        if let Some(station) = self.stations.get_mut(&lz.station_id) {
            station.by_room.remove(&lz.room_key(lz_id));
            station.gateways.remove(&lz_id);
        }
    }

    fn list(&mut self, lz_id: Uuid) {
        let Some(lz) = self.lzs.get(&lz_id) else { return };
        let station = self.stations.entry(lz.station_id).or_default();
        station.all.insert(lz_id);
        if lz.connection.is_some() {
            if lz.max_jobs.is_some() {
                station.gateways.insert(lz_id);
            } else {
                station.by_room.insert(lz.room_key(lz_id));
            }
        }
    }

    /// Counts an LZ's size in (or, `added` false, out of) its station's sizes. Only adding,
    /// replacing, removing an LZ or a change of its capacity moves it, never holding a job.
    fn count_size(&mut self, lz_id: Uuid, added: bool) {
        let Some(lz) = self.lzs.get(&lz_id) else { return };
        self.stations.entry(lz.station_id).or_default().count_size(lz.capacity, added);
    }

    /// Changes an LZ, keeping the index current.
    pub fn update<R>(&mut self, lz_id: Uuid, change: impl FnOnce(&mut LzState) -> R) -> Option<R> {
        self.unlist(lz_id);
        let lz = self.lzs.get_mut(&lz_id)?;
        let (before, result) = (lz.capacity, change(lz));
        if lz.capacity != before {
            let after = lz.capacity;
            let station = self.stations.entry(lz.station_id).or_default();
            station.count_size(before, false);
            station.count_size(after, true);
        }
        self.list(lz_id);
        Some(result)
    }

    /// Adds or replaces an LZ (its jobs are the caller's to hold again).
    pub fn insert(&mut self, lz_id: Uuid, lz: LzState) {
        self.unlist(lz_id);
        self.count_size(lz_id, false);
        self.lzs.insert(lz_id, lz);
        self.count_size(lz_id, true);
        self.list(lz_id);
    }

    /// Removes an LZ with the jobs it holds.
    pub fn remove(&mut self, lz_id: Uuid) -> Option<LzState> {
        self.unlist(lz_id);
        self.count_size(lz_id, false);
        let lz = self.lzs.remove(&lz_id)?;
        if let Some(station) = self.stations.get_mut(&lz.station_id) {
            station.all.remove(&lz_id);
        }
        for (job_id, placed) in lz.jobs.iter().filter(|(_, placed)| placed.leads() && !placed.orphan) {
            self.placed_on.remove(job_id);
            self.uncount(placed);
        }
        Some(lz)
    }

    fn uncount(&mut self, placed: &Placed) {
        if !placed.leads() {
            return;
        }
        self.usage.leave(placed.entry.job_id);
        let user_id = placed.key.user_id;
        if let Some(n) = self.per_user.get_mut(&user_id) {
            *n -= 1;
            if *n == 0 {
                self.per_user.remove(&user_id);
            }
        }
        let project = (placed.key.station_id, placed.key.project_id);
        if let Some(held) = self.per_project.get_mut(&project) {
            held.count(placed.entry.total(), -1);
            if held.jobs == 0 {
                self.per_project.remove(&project);
            }
        }
    }

    /// Counts a placed job (with its `gpu_indices`) against an LZ's free resources; a gang's part
    /// other than rank 0 only takes its room there.
    pub fn hold(&mut self, lz_id: Uuid, placed: Placed) {
        let (job_id, user_id) = (placed.entry.job_id, placed.key.user_id);
        let project = (placed.key.station_id, placed.key.project_id);
        let shape = placed.entry.total();
        let (time_limit, key, leads) = (placed.entry.time_limit, placed.key, placed.leads());
        let held = self.update(lz_id, |lz| {
            lz.take_room(&placed);
            lz.jobs.insert(job_id, placed);
        });
        if held.is_some() && leads {
            self.usage.place(job_id, &key, shape.0, shape.2, time_limit);
            self.placed_on.insert(job_id, lz_id);
            *self.per_user.entry(user_id).or_default() += 1;
            self.per_project.entry(project).or_default().count(shape, 1);
        }
    }

    /// Takes a placed job off its LZ, giving back what it held: a gang off all its LZs at once,
    /// answering its rank 0's part. A gang's part that still runs on another node is left there
    /// an [orphan](Placed::orphan), holding its room until it ends (its agent is the caller's to
    /// stop). An orphan's end gives back its room, and answers nothing.
    pub fn release(&mut self, lz_id: Uuid, job_id: Uuid) -> Option<Placed> {
        let mut placed = self.release_room(lz_id, job_id)?;
        if placed.orphan {
            return None;
        }
        let nodes: Vec<Uuid> = placed.other_nodes(lz_id).collect();
        for node in nodes {
            let Some(part) = self.lzs.get_mut(&node).and_then(|lz| lz.jobs.get_mut(&job_id)) else { continue };
            let leader = part.leads().then(|| part.clone());
            if part.status.is_final() {
                self.release_room(node, job_id);
            } else {
                part.orphan = true;
            }
            if let Some(leader) = leader {
                placed = leader;
            }
        }
        if placed.leads() {
            self.placed_on.remove(&job_id);
            self.uncount(&placed);
        }
        Some(placed)
    }

    /// Takes one LZ's part of a placed job off it, giving back the room it held there.
    fn release_room(&mut self, lz_id: Uuid, job_id: Uuid) -> Option<Placed> {
        self.update(lz_id, |lz| {
            let placed = lz.jobs.remove(&job_id)?;
            if lz.max_jobs.is_none() {
                lz.free_cpu += i64::from(placed.entry.cpu_count);
                lz.free_memory += placed.entry.memory_amount as i64;
                let gpus = &lz.gpus;
                lz.free_gpus.extend(placed.gpu_indices.iter().filter(|g| gpus.contains(g)));
            }
            Some(placed)
        })?
    }

    /// Replaces an LZ's state (a new connection, perhaps a new capacity) with `lz`, which keeps
    /// the jobs the old one held, their room taken from the new capacity: to the counts and
    /// usage they never left.
    pub fn replace_keeping_jobs(&mut self, lz_id: Uuid, mut lz: LzState) {
        let jobs = self.lzs.get_mut(&lz_id).map(|old| std::mem::take(&mut old.jobs)).unwrap_or_default();
        for placed in jobs.values() {
            lz.take_room(placed);
        }
        lz.jobs = jobs;
        self.insert(lz_id, lz);
    }

    /// Takes every job off an LZ.
    pub fn release_all(&mut self, lz_id: Uuid) -> Vec<Placed> {
        let ids: Vec<Uuid> = self.lzs.get(&lz_id).map(|lz| lz.jobs.keys().copied().collect()).unwrap_or_default();
        ids.into_iter().filter_map(|id| self.release(lz_id, id)).collect()
    }

    /// Takes a connected LZ that counts resources out of its station's index by room, for the
    /// rest of a placement pass that holds it: no walk of the index meets it there.
    /// [`Fleet::put_back`] undoes it. Answers whether it was set aside (gateways are not).
    pub fn set_aside(&mut self, lz_id: Uuid) -> bool {
        let Some(lz) = self.lzs.get(&lz_id).filter(|lz| lz.max_jobs.is_none() && lz.connection.is_some()) else {
            return false;
        };
        let station = self.stations.get_mut(&lz.station_id).expect("listed");
        station.by_room.remove(&lz.room_key(lz_id));
        station.aside += 1;
        true
    }

    /// Puts an LZ [set aside](Fleet::set_aside) back in its station's index.
    pub fn put_back(&mut self, lz_id: Uuid) {
        let Some(lz) = self.lzs.get(&lz_id) else { return };
        let station = self.stations.get_mut(&lz.station_id).expect("listed");
        station.aside -= 1;
        station.by_room.insert(lz.room_key(lz_id));
    }

    /// How many of the station's LZs that count resources have a free CPU.
    pub fn with_free_cpus(&self, station_id: Uuid) -> usize {
        self.stations.get(&station_id).map_or(0, |station| station.by_room.range((1, i64::MIN, Uuid::nil())..).count())
    }

    /// Whether the LZ counts resources and has a free CPU (one of [`Fleet::with_free_cpus`]).
    pub fn has_free_cpus(&self, lz_id: &Uuid) -> bool {
        self.lzs.get(lz_id).is_some_and(|lz| lz.connection.is_some() && lz.max_jobs.is_none() && lz.free_cpu >= 1)
    }

    /// Whether a gateway of the station not in `reserved` has a free slot.
    pub fn gateway_room_left(&self, station_id: Uuid, reserved: &impl Fn(Uuid) -> bool) -> bool {
        let Some(station) = self.stations.get(&station_id) else { return false };
        station.gateways.iter().any(|id| !reserved(*id) && self.lzs.get(id).is_some_and(LzState::has_room))
    }
}
