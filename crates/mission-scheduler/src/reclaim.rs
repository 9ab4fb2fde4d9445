//! Reclaiming borrowed room.
//!
//! A project may run beyond its nominal limits on a station while the room is idle (it
//! *borrows*, up to its borrowing limit). When a project within its nominal then has a job
//! that cannot start for want of room, the pass plans to reclaim the room ([`plan`]): on one
//! landing zone, the fewest borrowed jobs whose stop makes room for the job. Those get a stop
//! order with the server's grace period (`SIGTERM`, then `SIGKILL`); when each has ended the
//! scheduler puts it back in line at its old place, saying why, and the waiting job holds that
//! landing zone meanwhile. While a station reclaims for a project, jobs that would borrow there
//! wait, so the freed room is not borrowed again first.
//!
//! Only borrowed work is reclaimed: a job is borrowed when its project would still hold at least
//! its nominal CPUs without it (and without the jobs chosen before it), and GPUs likewise where
//! the job holds GPUs. A project without limits on the station has no nominal there, so all it
//! runs there is borrowed. Newer jobs (later in their queue) are chosen first: they lose the
//! least work. Batch-system gateways are left alone (their jobs wait in another scheduler's
//! queue, which reclaims by its own rules), and a station may turn reclaiming off.

use std::collections::HashMap;

use uuid::Uuid;

use super::fleet::{Fleet, LzState};
use super::limits::Limits;
use super::queue::Queued;

/// What a pass does to make room for a job within its project's nominal.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    /// The landing zone the job waits on.
    pub lz_id: Uuid,
    /// The borrowed jobs to stop there (none when those already stopping make the room).
    pub victims: Vec<Uuid>,
}

/// The landing zone of `station` where stopping the fewest borrowed jobs (of projects other
/// than `project`) makes room for `job`, and those jobs; `None` where no choice of borrowed
/// jobs on any one LZ would. Only LZs `usable` answers for are looked at (the pass holds the
/// others). Costs a walk over the station's LZs and their jobs: asked only for a job within
/// its project's nominal that found no room.
pub(super) fn plan(
    fleet: &Fleet,
    limits: &Limits,
    station: Uuid,
    project: Uuid,
    job: &Queued,
    usable: impl Fn(&Uuid) -> bool,
) -> Option<Plan> {
    let lzs = fleet.station(&station)?;
    let mut best: Option<(usize, u64, Plan)> = None;
    for lz_id in lzs.all.iter().filter(|id| usable(id)) {
        let Some(lz) = fleet.get(lz_id) else { continue };
        if lz.connection.is_none() || lz.max_jobs.is_some() || !lz.could_hold(job) {
            continue;
        }
        let Some((victims, cpus)) = victims_on(fleet, limits, station, project, lz, job) else { continue };
        if victims.is_empty() {
            return Some(Plan { lz_id: *lz_id, victims });
        }
        if best.as_ref().is_none_or(|(count, most, _)| (victims.len(), cpus) < (*count, *most)) {
            best = Some((victims.len(), cpus, Plan { lz_id: *lz_id, victims }));
        }
    }
    best.map(|(_, _, plan)| plan)
}

/// The borrowed jobs on `lz` to stop, newest first, until what they free (with its free room
/// and the jobs already being reclaimed there) holds `job`, and the CPUs they hold; `None`
/// when all of them would not do.
fn victims_on(
    fleet: &Fleet,
    limits: &Limits,
    station: Uuid,
    project: Uuid,
    lz: &LzState,
    job: &Queued,
) -> Option<(Vec<Uuid>, u64)> {
    let mut room = (lz.free_cpu, lz.free_memory, lz.free_gpus.len() as i64);
    let fits = |room: (i64, i64, i64)| {
        room.0 >= i64::from(job.cpu_count) && room.1 >= job.memory_amount as i64 && room.2 >= i64::from(job.gpu_count)
    };
    let frees = |room: &mut (i64, i64, i64), p: &super::fleet::Placed| {
        room.0 += i64::from(p.entry.cpu_count);
        room.1 += p.entry.memory_amount as i64;
        room.2 += p.gpu_indices.len() as i64;
    };
    for stopping in lz.jobs.values().filter(|p| p.requeue_reason.is_some()) {
        frees(&mut room, stopping);
    }
    if fits(room) {
        return Some((Vec::new(), 0));
    }
    let mut candidates: Vec<_> = lz
        .jobs
        .values()
        .filter(|p| p.requeue_reason.is_none() && !p.stop_requested && p.key.project_id != project)
        .collect();
    candidates.sort_unstable_by_key(|p| std::cmp::Reverse(p.seq));
    // CPUs and GPUs each project gives up by the jobs chosen so far.
    let mut given: HashMap<Uuid, (u64, u64)> = HashMap::new();
    let (mut victims, mut cpus) = (Vec::new(), 0);
    for candidate in candidates {
        let owner = candidate.key.project_id;
        let held = fleet.held_by(station, owner);
        let (nominal_cpus, nominal_gpus) = limits.nominal(station, owner);
        let (gave_cpus, gave_gpus) = given.entry(owner).or_default();
        let (its_cpus, its_gpus) = (u64::from(candidate.entry.cpu_count), u64::from(candidate.entry.gpu_count));
        let borrowed = held.cpus.saturating_sub(*gave_cpus + its_cpus) >= nominal_cpus
            && held.cpus >= *gave_cpus + its_cpus
            && (its_gpus == 0 || held.gpus.saturating_sub(*gave_gpus + its_gpus) >= nominal_gpus);
        if !borrowed {
            continue;
        }
        *gave_cpus += its_cpus;
        *gave_gpus += its_gpus;
        cpus += its_cpus;
        victims.push(candidate.entry.job_id);
        frees(&mut room, candidate);
        if fits(room) {
            return Some((victims, cpus));
        }
    }
    None
}
