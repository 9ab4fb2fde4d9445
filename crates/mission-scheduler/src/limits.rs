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
}

impl Limits {
    /// Sets (or replaces) the limits of a record.
    pub fn set(&mut self, record: LimitsRecord) {
        let ceiling = record.limits.ceiling();
        let cap = Cap { project: record.project_name, station: record.station_name, limits: record.limits, ceiling };
        self.caps.insert((record.station_id, record.project_id), cap);
    }

    /// The share of `project` on `station`, where its limits set one.
    pub fn share(&self, station: Uuid, project: Uuid) -> Option<f64> {
        self.caps.get(&(station, project)).and_then(|cap| cap.limits.share)
    }

    /// Every (station, project) with a share set, and the share.
    pub fn shares(&self) -> impl Iterator<Item = (Uuid, Uuid, f64)> + '_ {
        self.caps.iter().filter_map(|((station, project), cap)| Some((*station, *project, cap.limits.share?)))
    }

    /// Drops the limits of `project` on `station`.
    pub fn remove(&mut self, station: Uuid, project: Uuid) {
        self.caps.remove(&(station, project));
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
        let asks = [
            (
                "CPUs",
                held.cpus,
                u64::from(job.cpu_count),
                cap.ceiling.0,
                cap.limits.nominal.and_then(|n| n.cpus.map(u64::from)),
            ),
            (
                "MB of memory",
                held.memory,
                job.memory_amount,
                cap.ceiling.1,
                cap.limits.nominal.and_then(|n| n.memory_mb),
            ),
            (
                "GPUs",
                held.gpus,
                u64::from(job.gpu_count),
                cap.ceiling.2,
                cap.limits.nominal.and_then(|n| n.gpus.map(u64::from)),
            ),
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
