//! Decayed usage, which fair-share order ranks projects and users by.
//!
//! A job uses its CPUs plus its GPUs times its seconds on a landing zone (a GPU-second counts as a
//! CPU-second). Usage decays with a half-life the server sets: what was used one half-life ago
//! counts half. [`Usage`] keeps, per project and per (project, user), what was used, decayed, and
//! what the jobs on landing zones are expected to use:
//!
//! - A job is charged as it is placed, for its time limit (or the expected run where it has
//!   none), so that a burst of submissions does not jump ahead of others before its usage counts.
//!   A job without a time limit that runs past what it was charged is charged another expected
//!   run each time it does ([`Usage::accrue`]), so a week-long job counts as it runs, not only
//!   when it ends. When it leaves its landing zone its charges are taken back and what it used is
//!   charged instead.
//! - Decay is applied the other way round, the way Slurm and HTCondor keep it cheap: instead of
//!   every amount shrinking as time passes, new charges grow, by 2^(t/half-life) for a charge made
//!   at time t. Ratios between amounts are the same either way, so no amount has to change as time
//!   passes and an order by usage holds until a charge changes it. When the factor grows large
//!   every amount is scaled down together ([`Usage::rebase`]).
//!
//! What was used is not written anywhere of its own: the jobs' rows say it (CPUs, GPUs, wall time,
//! when they finished), and [`Usage::load`] sums them at a restart.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::Duration;

use mission_store::UsedRow;
use tokio::time::Instant;
use uuid::Uuid;

use super::queue::QueueKey;

/// What a job without a time limit is expected to run for, as it is charged when placed.
pub(crate) const EXPECTED_RUN: Duration = Duration::from_secs(3600);

/// Entries of jobs that left that `due` may hold before it is swept, besides twice the charges.
const DUE_SLACK: usize = 64;

/// Once charges grow by more than 2^this, every amount is scaled down.
const REBASE_EXPONENT: f64 = 64.0;

/// A job's charge while it is on a landing zone.
#[derive(Debug, Clone, Copy)]
struct Charge {
    project: Uuid,
    user: Uuid,
    cpus: f64,
    gpus: f64,
    /// What it was charged while it runs (grown, as every amount here is).
    provisional: f64,
    since: Instant,
    /// The seconds its provisional charge covers: its time limit, or as many expected runs as
    /// it has begun (`None` with a time limit).
    open_ended: Option<f64>,
    /// Its wall time in seconds as its agent measured it, once told: what it is charged.
    measured: Option<f64>,
}

/// Decayed usage per project and per (project, user); see the module docs.
#[derive(Debug)]
pub(crate) struct Usage {
    half_life: Duration,
    /// What a job with no time limit is expected to run for.
    expected: Duration,
    /// Charges made at this instant grow by 1.
    epoch: Instant,
    projects: HashMap<Uuid, f64>,
    members: HashMap<(Uuid, Uuid), f64>,
    charges: HashMap<Uuid, Charge>,
    /// When each running job without a time limit runs past what it was charged: soonest first
    /// (an entry of a job that left meanwhile is dropped when it comes up).
    due: BinaryHeap<Reverse<(Instant, Uuid)>>,
    /// (project, user) pairs whose usage changed since [`Usage::changed`] was last drained.
    changed: HashSet<(Uuid, Uuid)>,
    /// What the jobs that left their landing zones since [`Usage::spent`] was last drained
    /// used: (job, project, CPU-seconds, GPU-seconds), what budgets charge.
    spent: Vec<(Uuid, Uuid, f64, f64)>,
}

impl Usage {
    /// No usage yet, decaying with `half_life`; a job without a time limit is charged for
    /// `expected` as it is placed.
    pub fn new(half_life: Duration, expected: Duration) -> Self {
        Self {
            half_life: half_life.max(Duration::from_secs(1)),
            expected,
            epoch: Instant::now(),
            projects: HashMap::new(),
            members: HashMap::new(),
            charges: HashMap::new(),
            due: BinaryHeap::new(),
            changed: HashSet::new(),
            spent: Vec::new(),
        }
    }

    /// What a charge made now grows by.
    fn growth(&mut self, now: Instant) -> f64 {
        let exponent = now.saturating_duration_since(self.epoch).as_secs_f64() / self.half_life.as_secs_f64();
        if exponent > REBASE_EXPONENT {
            self.rebase(now);
            return 1.0;
        }
        exponent.exp2()
    }

    /// Scales every amount down so that charges made `now` grow by 1 again: the order of the
    /// amounts stays as it was, and every pair is marked changed.
    fn rebase(&mut self, now: Instant) {
        let exponent = now.saturating_duration_since(self.epoch).as_secs_f64() / self.half_life.as_secs_f64();
        let scale = (-exponent).exp2();
        self.epoch = now;
        self.projects.values_mut().for_each(|v| *v *= scale);
        self.members.values_mut().for_each(|v| *v *= scale);
        self.charges.values_mut().for_each(|c| c.provisional *= scale);
        self.changed.extend(self.members.keys().copied());
    }

    fn add(&mut self, project: Uuid, user: Uuid, amount: f64) {
        // Taking back a charge leaves rounding dust, never less than nothing.
        let add = |v: &mut f64| *v = (*v + amount).max(0.0);
        add(self.projects.entry(project).or_default());
        add(self.members.entry((project, user)).or_default());
        self.changed.insert((project, user));
    }

    /// How long a job with `time_limit` (minutes) is expected to run, in seconds: its time limit,
    /// or the expected run where it has none.
    pub fn expected_seconds(&self, time_limit: Option<u32>) -> f64 {
        time_limit.map_or(self.expected.as_secs_f64(), |minutes| f64::from(minutes) * 60.0)
    }

    /// Charges a job placed on a landing zone: `cpus + gpus` for its `time_limit` in minutes (or
    /// the expected run where it has none).
    pub fn place(&mut self, job_id: Uuid, key: &QueueKey, cpus: u32, gpus: u32, time_limit: Option<u32>) {
        let now = Instant::now();
        let (cpus, gpus) = (f64::from(cpus), f64::from(gpus));
        let seconds = self.expected_seconds(time_limit);
        let provisional = (cpus + gpus) * seconds * self.growth(now);
        self.add(key.project_id, key.user_id, provisional);
        let open_ended = time_limit.is_none().then_some(seconds);
        if open_ended.is_some() {
            self.due.push(Reverse((now + self.expected, job_id)));
        }
        let charge = Charge {
            project: key.project_id,
            user: key.user_id,
            cpus,
            gpus,
            provisional,
            since: now,
            open_ended,
            measured: None,
        };
        self.charges.insert(job_id, charge);
    }

    /// Charges each running job without a time limit that ran past what it was charged another
    /// expected run: O(log jobs) for each such charge, nothing for the others.
    pub fn accrue(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, job_id))) = self.due.peek().copied() {
            if at > now {
                return;
            }
            self.due.pop();
            let growth = self.growth(now);
            let expected = self.expected.as_secs_f64();
            let Some(charge) = self.charges.get_mut(&job_id) else { continue };
            let Some(covered) = charge.open_ended.as_mut() else { continue };
            *covered += expected;
            let more = (charge.cpus + charge.gpus) * expected * growth;
            charge.provisional += more;
            let (project, user, next) = (charge.project, charge.user, charge.since + Duration::from_secs_f64(*covered));
            self.add(project, user, more);
            self.due.push(Reverse((next, job_id)));
        }
    }

    /// A job left its landing zone: its charge is taken back and what it used is charged.
    pub fn leave(&mut self, job_id: Uuid) {
        if !self.charges.contains_key(&job_id) {
            return;
        }
        let now = Instant::now();
        // Grown first: a rebase scales the charge kept here with everything else.
        let growth = self.growth(now);
        let charge = self.charges.remove(&job_id).expect("looked up");
        let seconds = charge.measured.unwrap_or_else(|| now.saturating_duration_since(charge.since).as_secs_f64());
        self.add(charge.project, charge.user, (charge.cpus + charge.gpus) * seconds * growth - charge.provisional);
        self.spent.push((job_id, charge.project, charge.cpus * seconds, charge.gpus * seconds));
        // A job that left keeps its entry in `due` until it comes up; short jobs without a time
        // limit would pile up an hour's worth of them, so they are swept once they outnumber
        // the charges (each live charge has at most one): amortised O(1) a leave.
        if self.due.len() > 2 * self.charges.len() + DUE_SLACK {
            let charges = &self.charges;
            self.due.retain(|Reverse((_, job_id))| charges.contains_key(job_id));
        }
    }

    /// The wall time a job's agent measured, in seconds: what it is charged as it leaves (else
    /// the time since it was placed).
    pub fn measured(&mut self, job_id: Uuid, wall_time: f64) {
        if let Some(charge) = self.charges.get_mut(&job_id) {
            charge.measured = Some(wall_time);
        }
    }

    /// Adds what the jobs' rows say was used, `UsedRow::seconds_ago` before now.
    pub fn load(&mut self, rows: impl IntoIterator<Item = UsedRow>) {
        let growth = self.growth(Instant::now());
        for row in rows {
            let decay = (-row.seconds_ago.max(0.0) / self.half_life.as_secs_f64()).exp2();
            self.add(row.project_id, row.user_id, row.used * decay * growth);
        }
    }

    /// How far back usage still counts for something: twenty half-lives (a millionth).
    pub fn horizon(&self) -> Duration {
        self.half_life * 20
    }

    /// A project's usage (in the scale of every amount here).
    pub fn of_project(&self, project: Uuid) -> f64 {
        self.projects.get(&project).copied().unwrap_or(0.0)
    }

    /// A user's usage in a project.
    pub fn of_member(&self, project: Uuid, user: Uuid) -> f64 {
        self.members.get(&(project, user)).copied().unwrap_or(0.0)
    }

    /// Every (project, user) pair with usage, and its usage.
    pub fn members(&self) -> impl Iterator<Item = ((Uuid, Uuid), f64)> + '_ {
        self.members.iter().map(|(pair, usage)| (*pair, *usage))
    }

    /// What the jobs that left their landing zones since the last call used: (job, project,
    /// CPU-seconds, GPU-seconds).
    pub fn spent(&mut self) -> Vec<(Uuid, Uuid, f64, f64)> {
        std::mem::take(&mut self.spent)
    }

    /// The (project, user) pairs whose usage changed since the last call.
    pub fn changed(&mut self) -> Vec<(Uuid, Uuid)> {
        self.changed.drain().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(project: u128, user: u128) -> QueueKey {
        QueueKey { station_id: Uuid::nil(), project_id: Uuid::from_u128(project), user_id: Uuid::from_u128(user) }
    }

    #[tokio::test(start_paused = true)]
    async fn charges_are_expected_at_placement_and_corrected_at_the_end() {
        let mut usage = Usage::new(Duration::from_secs(100), Duration::from_secs(60));
        let (a, b) = (key(1, 1), key(2, 2));
        usage.place(Uuid::from_u128(10), &a, 2, 0, None);
        usage.place(Uuid::from_u128(20), &b, 1, 1, Some(10));
        assert_eq!(usage.of_project(a.project_id), 120.0, "2 CPUs for the expected minute");
        assert_eq!(usage.of_member(b.project_id, b.user_id), 1200.0, "a CPU and a GPU for the time limit");
        let mut changed = usage.changed();
        changed.sort();
        assert_eq!(changed, [(a.project_id, a.user_id), (b.project_id, b.user_id)]);

        tokio::time::advance(Duration::from_secs(100)).await;
        usage.leave(Uuid::from_u128(10));
        // 200 CPU-seconds, charged one half-life after the epoch: twice what a charge at the
        // epoch counts, as b's 1200 still do.
        assert!((usage.of_project(a.project_id) - 400.0).abs() < 1e-9, "{}", usage.of_project(a.project_id));
        assert_eq!(usage.of_project(b.project_id), 1200.0);
        usage.leave(Uuid::from_u128(10));
        assert!((usage.of_project(a.project_id) - 400.0).abs() < 1e-9, "a job leaves once");
        assert_eq!(
            usage.spent(),
            [(Uuid::from_u128(10), a.project_id, 200.0, 0.0)],
            "what budgets charge: 2 CPUs for 100 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_without_a_time_limit_is_charged_again_each_time_it_runs_past_its_charge() {
        // A half-life long enough that growth over these minutes is negligible.
        let mut usage = Usage::new(Duration::from_secs(1 << 40), Duration::from_secs(60));
        let (a, b) = (key(1, 1), key(2, 2));
        usage.place(Uuid::from_u128(10), &a, 2, 0, None);
        usage.place(Uuid::from_u128(20), &b, 1, 0, Some(1));
        tokio::time::advance(Duration::from_secs(59)).await;
        usage.accrue();
        assert!((usage.of_project(a.project_id) - 120.0).abs() < 1e-6, "within its first expected minute");

        tokio::time::advance(Duration::from_secs(91)).await;
        usage.accrue();
        // 150 s in: its second and third minutes have begun, each charged as it does.
        assert!((usage.of_project(a.project_id) - 360.0).abs() < 1e-6, "{}", usage.of_project(a.project_id));
        assert!((usage.of_project(b.project_id) - 60.0).abs() < 1e-6, "a time limit is charged once");
        usage.accrue();
        assert!((usage.of_project(a.project_id) - 360.0).abs() < 1e-6, "nothing more is due yet");

        // Leaving replaces every charge with what it used: 2 CPUs for 150 s.
        usage.leave(Uuid::from_u128(10));
        assert!((usage.of_project(a.project_id) - 300.0).abs() < 1e-6, "{}", usage.of_project(a.project_id));
        tokio::time::advance(Duration::from_secs(600)).await;
        usage.accrue();
        assert!((usage.of_project(a.project_id) - 300.0).abs() < 1e-6, "a job that left accrues nothing");

        // Short jobs without a time limit leave their due entries behind; those are swept.
        for n in 0..10_000u128 {
            usage.place(Uuid::from_u128(1_000 + n), &a, 1, 0, None);
            usage.leave(Uuid::from_u128(1_000 + n));
        }
        assert!(usage.due.len() <= 2 * usage.charges.len() + DUE_SLACK + 1, "{} due entries", usage.due.len());
    }

    #[tokio::test(start_paused = true)]
    async fn old_usage_counts_less_and_a_rebase_keeps_the_order() {
        let mut usage = Usage::new(Duration::from_secs(10), Duration::from_secs(1));
        let (p, q) = (Uuid::from_u128(1), Uuid::from_u128(2));
        usage.load([
            UsedRow { project_id: p, user_id: p, used: 1000.0, seconds_ago: 20.0 },
            UsedRow { project_id: q, user_id: q, used: 300.0, seconds_ago: 0.0 },
        ]);
        assert!((usage.of_project(p) - 250.0).abs() < 1e-9, "two half-lives ago: a quarter");
        assert!(usage.of_project(q) > usage.of_project(p));

        tokio::time::advance(Duration::from_secs(10 * 65)).await;
        usage.changed();
        usage.place(Uuid::from_u128(3), &key(1, 1), 1, 0, Some(1));
        // Everything was scaled down by 2^65 and the new charge, a CPU-minute, counts as made at
        // the epoch.
        assert_eq!(usage.of_project(p), 60.0 + 250.0 * (-65f64).exp2());
        assert!(usage.of_project(q) < usage.of_project(p));
        assert_eq!(usage.changed().len(), 2, "a rebase marks every pair changed");
        assert_eq!(usage.horizon(), Duration::from_secs(200));
    }
}
