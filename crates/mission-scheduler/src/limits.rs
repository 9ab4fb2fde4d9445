//! Projects' limits on stations, as placement applies them.
//!
//! [`Limits`] keeps, for each (station, project) that has limits, what the project may hold
//! there: a job whose start would take the project past its running-jobs cap or past nominal
//! plus borrowing (for any of CPUs, memory, GPUs) waits, its pending reason naming the limit in
//! words ([`Limits::refusal`]); a submission past the queued-jobs cap is refused
//! ([`Limits::queue_room`]). What the project holds is the fleet's count
//! ([`Held`](super::fleet::Held)), kept as jobs are placed and end, so a check costs a map
//! lookup, not a walk over the project's jobs.

use std::collections::HashMap;

use mission_api::ProjectLimits;
use mission_store::LimitsRecord;
use uuid::Uuid;

use super::fleet::Held;
use super::queue::Queued;

/// One project's limits on one station, with the names its pending reasons use.
#[derive(Debug, Clone)]
struct Cap {
    project: String,
    station: String,
    limits: ProjectLimits,
    /// The most CPUs, megabytes and GPUs it may hold: nominal plus borrowing (`None`: no limit).
    ceiling: (Option<u64>, Option<u64>, Option<u64>),
}

/// Every project's limits on every station; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    caps: HashMap<(Uuid, Uuid), Cap>,
    /// Per station, how many projects set nominal CPUs there.
    guaranteed: HashMap<Uuid, usize>,
}

impl Limits {
    /// Sets (or replaces) the limits of a record.
    pub fn set(&mut self, record: LimitsRecord) {
        let ceiling = record.limits.ceiling();
        let cap = Cap { project: record.project_name, station: record.station_name, limits: record.limits, ceiling };
        let guarantees = cap.limits.nominal.is_some_and(|n| n.cpus.is_some());
        *self.guaranteed.entry(record.station_id).or_default() += usize::from(guarantees);
        if let Some(old) = self.caps.insert((record.station_id, record.project_id), cap) {
            self.unguarantee(record.station_id, &old);
        }
    }

    /// Takes back what `old`, replaced or dropped, counted in `guaranteed`.
    fn unguarantee(&mut self, station: Uuid, old: &Cap) {
        if old.limits.nominal.is_some_and(|n| n.cpus.is_some()) {
            *self.guaranteed.entry(station).or_default() -= 1;
        }
    }

    /// The share of `project` on `station`, where its limits set one.
    pub fn share(&self, station: Uuid, project: Uuid) -> Option<f64> {
        self.caps.get(&(station, project)).and_then(|cap| cap.limits.share)
    }

    /// Every (station, project) with a share set, and the share.
    pub fn shares(&self) -> impl Iterator<Item = (Uuid, Uuid, f64)> + '_ {
        self.caps.iter().filter_map(|((station, project), cap)| Some((*station, *project, cap.limits.share?)))
    }

    /// The CPUs and GPUs `project` is guaranteed on `station` (its nominal): 0 where its limits
    /// set none, or it has no limits there.
    pub fn nominal(&self, station: Uuid, project: Uuid) -> (u64, u64) {
        let nominal = self.caps.get(&(station, project)).and_then(|cap| cap.limits.nominal);
        nominal.map_or((0, 0), |n| (n.cpus.map_or(0, u64::from), n.gpus.map_or(0, u64::from)))
    }

    /// Whether `job`, started now, would keep `project` within its nominal on `station`, where
    /// it holds `held`: its limits there set nominal CPUs (and GPUs, where the job asks for
    /// some), and neither would be passed. Such a job may have borrowed room reclaimed for it
    /// (see `reclaim.rs`); any other one would borrow.
    pub fn within_nominal(&self, station: Uuid, project: Uuid, held: Held, job: &Queued) -> bool {
        let Some(nominal) = self.caps.get(&(station, project)).and_then(|cap| cap.limits.nominal) else {
            return false;
        };
        let within = |most: Option<u32>, holds: u64, wants: u32| {
            most.is_some_and(|most| holds + u64::from(wants) <= u64::from(most))
        };
        let (cpus, _, gpus) = job.total();
        within(nominal.cpus, held.cpus, cpus) && (gpus == 0 || within(nominal.gpus, held.gpus, gpus))
    }

    /// Whether some project is guaranteed room on `station` (sets nominal CPUs there): only
    /// then is anything reclaimed on it.
    pub fn guarantees_on(&self, station: Uuid) -> bool {
        self.guaranteed.get(&station).is_some_and(|count| *count > 0)
    }

    /// The names of `project` and `station`, as the project's limits there know them.
    pub fn names(&self, station: Uuid, project: Uuid) -> Option<(&str, &str)> {
        self.caps.get(&(station, project)).map(|cap| (cap.project.as_str(), cap.station.as_str()))
    }

    /// Drops the limits of `project` on `station`.
    pub fn remove(&mut self, station: Uuid, project: Uuid) {
        if let Some(old) = self.caps.remove(&(station, project)) {
            self.unguarantee(station, &old);
        }
    }

    /// Why a job asking for `job`'s resources may not start now, when `project` already holds
    /// what `held` answers on `station` (asked only where the project has limits there): the
    /// limit it would pass, in words; `None` when it may.
    pub fn refusal(&self, station: Uuid, project: Uuid, held: impl FnOnce() -> Held, job: &Queued) -> Option<String> {
        let cap = self.caps.get(&(station, project))?;
        let held = held();
        let (who, on) = (&cap.project, &cap.station);
        if let Some(most) = cap.limits.max_running_jobs
            && held.jobs >= most
        {
            return Some(format!("project {who} has {} of its {most} running jobs on station {on}", held.jobs));
        }
        let (cpus, memory, gpus) = job.total();
        let asks = [
            ("CPUs", held.cpus, u64::from(cpus), cap.ceiling.0, cap.limits.nominal.and_then(|n| n.cpus.map(u64::from))),
            ("MB of memory", held.memory, memory, cap.ceiling.1, cap.limits.nominal.and_then(|n| n.memory_mb)),
            ("GPUs", held.gpus, u64::from(gpus), cap.ceiling.2, cap.limits.nominal.and_then(|n| n.gpus.map(u64::from))),
        ];
        for (what, holds, wants, ceiling, nominal) in asks {
            let Some(ceiling) = ceiling.filter(|most| wants > 0 && holds + wants > *most) else { continue };
            let nominal = nominal.unwrap_or(0);
            return Some(if ceiling == nominal {
                format!("project {who} has {holds} of {ceiling} {what} on station {on} and may not borrow")
            } else {
                format!(
                    "project {who} has {holds} of {ceiling} {what} on station {on} ({nominal} nominal, {} borrowed \
                     at most); this job asks for {wants}",
                    ceiling - nominal
                )
            });
        }
        None
    }

    /// Whether `more` jobs of `project` may join the `queued` it has on `station`: the refusal
    /// in words when they would pass its queued-jobs cap.
    pub fn queue_room(&self, station: Uuid, project: Uuid, queued: u64, more: u64) -> Result<(), String> {
        let Some(cap) = self.caps.get(&(station, project)) else { return Ok(()) };
        match cap.limits.max_queued_jobs {
            Some(most) if queued + more > u64::from(most) => Err(format!(
                "project {} has {queued} of its {most} queued jobs on station {}; {more} more would pass that \
                 (max_queued_jobs)",
                cap.project, cap.station
            )),
            _ => Ok(()),
        }
    }
}
