//! Projects' budgets, as placement applies them.
//!
//! [`Budgets`] keeps, for each project with a budget, what it may spend per period and what it
//! spent in the current one: CPU-seconds and GPU-seconds, its jobs' CPUs (GPUs) times their time
//! on a landing zone, charged as each leaves its landing zone (`fair_share.rs` measures it). It is
//! read from the store's ended jobs when the budget is loaded, so a restart loses nothing; a new
//! period starts from nothing.
//!
//! A job placed holds what it may spend: its CPUs (GPUs) times its time limit, or an hour without
//! one (Slurm's `GrpTRESMins` counts running jobs the same way), until it leaves its landing zone
//! and is charged what it used. A job whose hold would take the project past its budget waits
//! ([`Budgets::refusal`]), so two jobs racing for the last of a budget never both start; once it
//! is spent, no job that needs what is spent starts until the next period (or a larger budget).
//! Running jobs finish.
//!
//! At 80% of either amount the project is warned once per period ([`Budgets::charge`] says so;
//! the scheduler writes a `project.budget_warning` event to each member).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mission_api::ProjectBudget;
use mission_store::BudgetRecord;
use uuid::Uuid;

/// At this part of a budget its project is warned.
const WARN_AT: f64 = 0.8;

/// One project's budget and what it spent this period.
#[derive(Debug, Clone)]
struct Budget {
    project: String,
    budget: ProjectBudget,
    period_start: DateTime<Utc>,
    period_end: Option<DateTime<Utc>>,
    /// CPU-seconds and GPU-seconds charged this period.
    spent: (f64, f64),
    /// CPU-seconds and GPU-seconds its placed jobs hold.
    held: (f64, f64),
    /// Warned this period.
    warned: bool,
}

impl Budget {
    /// Starts the next period when `now` is past this one.
    fn roll(&mut self, now: DateTime<Utc>) {
        if self.period_end.is_some_and(|end| now >= end) {
            self.period_start = self.budget.period.start(now);
            self.period_end = self.budget.period.end(now);
            self.spent = (0.0, 0.0);
            self.warned = false;
        }
    }

    /// The largest part of either amount spent (0 where the budget sets neither).
    fn part_spent(&self) -> f64 {
        let part = |spent: f64, hours: Option<f64>| {
            hours.map_or(0.0, |h| if h > 0.0 { spent / (h * 3600.0) } else { f64::INFINITY })
        };
        part(self.spent.0, self.budget.cpu_hours).max(part(self.spent.1, self.budget.gpu_hours))
    }
}

/// What a warning tells: the project, its budget and what it spent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Warning {
    pub project_id: Uuid,
    pub data: serde_json::Value,
}

/// Every project's budget; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Budgets {
    by_project: HashMap<Uuid, Budget>,
    /// What each placed job holds of its project's budget, where it has one or gets one while
    /// the job runs: (project, CPU-s, GPU-s).
    holds: HashMap<Uuid, (Uuid, f64, f64)>,
}

impl Budgets {
    /// Sets (or replaces) a project's budget, `spent` (CPU-seconds, GPU-seconds) in the period
    /// holding `now`. `warned`: whether a warning went out this period already (at a restart
    /// one did where 80% was passed); a budget set anew warns at once when it is passed.
    pub fn set(
        &mut self,
        record: BudgetRecord,
        spent: (f64, f64),
        now: DateTime<Utc>,
        warned: bool,
    ) -> Option<Warning> {
        let budget = record.budget;
        let mut entry = Budget {
            project: record.project_name,
            budget,
            period_start: budget.period.start(now),
            period_end: budget.period.end(now),
            spent,
            held: (0.0, 0.0),
            warned: false,
        };
        for (project, cpu, gpu) in self.holds.values() {
            if *project == record.project_id {
                entry.held.0 += cpu;
                entry.held.1 += gpu;
            }
        }
        let passed = entry.part_spent() >= WARN_AT;
        entry.warned = passed;
        self.by_project.insert(record.project_id, entry);
        (passed && !warned).then(|| self.warning(record.project_id, now))
    }

    /// Drops a project's budget.
    pub fn remove(&mut self, project: Uuid) {
        self.by_project.remove(&project);
    }

    /// Why a job of `project` that may spend `needs` (CPU-seconds, GPU-seconds) may not start at
    /// `now`: the budget it spent, or would pass, in words, and whether no job of the project may
    /// start (its CPU-hours are spent); `None` when it may.
    pub fn refusal(&self, project: Uuid, needs: (f64, f64), now: DateTime<Utc>) -> Option<(String, bool)> {
        let entry = self.by_project.get(&project)?;
        // A new period has nothing spent in it yet.
        let spent = if entry.period_end.is_some_and(|end| now >= end) { (0.0, 0.0) } else { entry.spent };
        let when = entry.budget.period.words(entry.period_start.max(entry.budget.period.start(now)));
        let amounts = [
            ("CPU-hours", entry.budget.cpu_hours, spent.0, entry.held.0, needs.0),
            ("GPU-hours", entry.budget.gpu_hours, spent.1, entry.held.1, needs.1),
        ];
        for (what, hours, spent, held, needs) in amounts {
            let Some(hours) = hours.filter(|_| needs > 0.0) else { continue };
            if spent >= hours * 3600.0 {
                let every_job = what == "CPU-hours";
                return Some((format!("project {} spent its {hours} {what} {when}", entry.project), every_job));
            }
            if spent + held + needs > hours * 3600.0 {
                let h = |seconds: f64| format!("{:.2}", seconds / 3600.0);
                let why = format!(
                    "project {} has {} of its {hours} {what} left {when}, {} of them held by its running jobs; this \
                     job may use {} (its time limit, or an hour without one)",
                    entry.project,
                    h(hours * 3600.0 - spent),
                    h(held),
                    h(needs)
                );
                return Some((why, false));
            }
        }
        None
    }

    /// A job of `project` was placed, holding `holds` (CPU-seconds, GPU-seconds) of its budget
    /// until it leaves its landing zone ([`Budgets::charge`]). Kept for every placed job, so
    /// that a budget set while a project's jobs run counts what they hold ([`Budgets::set`]).
    pub fn hold(&mut self, job_id: Uuid, project: Uuid, holds: (f64, f64)) {
        self.holds.insert(job_id, (project, holds.0, holds.1));
        let Some(entry) = self.by_project.get_mut(&project) else { return };
        entry.held.0 += holds.0;
        entry.held.1 += holds.1;
    }

    /// Every project with a budget, and the CPU-hours and GPU-hours it has left at `now` (of the
    /// amounts it sets; never less than none).
    pub fn left(&self, now: DateTime<Utc>) -> impl Iterator<Item = (Uuid, Option<f64>, Option<f64>)> + '_ {
        self.by_project.iter().map(move |(project, entry)| {
            let spent = if entry.period_end.is_some_and(|end| now >= end) { (0.0, 0.0) } else { entry.spent };
            let left = |hours: Option<f64>, seconds: f64| hours.map(|h| (h - seconds / 3600.0).max(0.0));
            (*project, left(entry.budget.cpu_hours, spent.0), left(entry.budget.gpu_hours, spent.1))
        })
    }

    /// Charges `project` what its job `job_id` used (CPU-seconds, GPU-seconds) as it left its
    /// landing zone at `now`, in place of what it held: the warning to send, when this takes the
    /// project past 80% of its budget.
    pub fn charge(
        &mut self,
        job_id: Uuid,
        project: Uuid,
        (cpu, gpu): (f64, f64),
        now: DateTime<Utc>,
    ) -> Option<Warning> {
        let held = self.holds.remove(&job_id);
        let entry = self.by_project.get_mut(&project)?;
        if let Some((_, held_cpu, held_gpu)) = held {
            entry.held.0 = (entry.held.0 - held_cpu).max(0.0);
            entry.held.1 = (entry.held.1 - held_gpu).max(0.0);
        }
        entry.roll(now);
        entry.spent.0 += cpu;
        entry.spent.1 += gpu;
        if entry.warned || entry.part_spent() < WARN_AT {
            return None;
        }
        entry.warned = true;
        Some(self.warning(project, now))
    }

    fn warning(&self, project_id: Uuid, now: DateTime<Utc>) -> Warning {
        let entry = &self.by_project[&project_id];
        let hours = |seconds: f64| (seconds / 36.0).round() / 100.0;
        let data = serde_json::json!({
            "project_id": project_id,
            "project": entry.project,
            "period": entry.budget.period,
            "period_start": entry.period_start,
            "cpu_hours": entry.budget.cpu_hours,
            "gpu_hours": entry.budget.gpu_hours,
            "spent_cpu_hours": hours(entry.spent.0),
            "spent_gpu_hours": hours(entry.spent.1),
            "detail": format!(
                "project {} has spent {:.0}% of its budget {}",
                entry.project,
                (entry.part_spent() * 100.0).min(100.0).floor(),
                entry.budget.period.words(now)
            ),
        });
        Warning { project_id, data }
    }
}

#[cfg(test)]
mod tests {
    use mission_api::BudgetPeriod;

    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_budget_warns_once_at_80_percent_stops_at_100_and_starts_again_next_period() {
        let project = Uuid::from_u128(1);
        let record = BudgetRecord {
            project_id: project,
            project_name: "astro".into(),
            budget: ProjectBudget { cpu_hours: Some(10.0), gpu_hours: Some(1.0), period: BudgetPeriod::Month },
            updated_at: at("2026-11-01T00:00:00Z"),
        };
        let mut budgets = Budgets::default();
        let now = at("2026-11-27T10:00:00Z");
        assert_eq!(budgets.set(record.clone(), (7.0 * 3600.0, 0.0), now, false), None, "70% is no warning yet");
        let (hour, job) = ((3600.0, 0.0), Uuid::from_u128(10));
        assert_eq!(budgets.refusal(project, hour, now), None);
        // A job that may run an hour holds it: another that may, has 3 hours, one held, left.
        budgets.hold(job, project, hour);
        assert_eq!(budgets.refusal(project, (2.0 * 3600.0, 0.0), now), None);
        assert_eq!(
            budgets.refusal(project, (2.5 * 3600.0, 0.0), now).unwrap().0,
            "project astro has 3.00 of its 10 CPU-hours left for November 2026, 1.00 of them held by its running \
             jobs; this job may use 2.50 (its time limit, or an hour without one)"
        );
        let warning = budgets.charge(job, project, (3600.0, 0.0), now).expect("80%");
        assert_eq!(warning.data["spent_cpu_hours"], 8.0);
        assert_eq!(warning.data["detail"], "project astro has spent 80% of its budget for November 2026");
        assert_eq!(budgets.charge(job, project, (1800.0, 0.0), now), None, "once a period");
        assert_eq!(budgets.refusal(project, hour, now), None, "8.5 of 10 hours");
        budgets.charge(job, project, (5400.0, 0.0), now);
        assert_eq!(
            budgets.refusal(project, (1.0, 0.0), now).unwrap(),
            ("project astro spent its 10 CPU-hours for November 2026".to_owned(), true)
        );
        // December: nothing spent, nothing refused.
        let december = at("2026-12-01T00:00:01Z");
        assert_eq!(budgets.refusal(project, hour, december), None);
        // GPU-hours spent stop GPU jobs only.
        assert!(budgets.charge(job, project, (0.0, 3600.0), december).is_some());
        assert_eq!(
            budgets.refusal(project, (3600.0, 3600.0), december).unwrap(),
            ("project astro spent its 1 GPU-hours for December 2026".to_owned(), false)
        );
        assert_eq!(budgets.refusal(project, hour, december), None);
        // Set anew past 80%: a warning at once, unless one went out already (a restart).
        assert!(budgets.set(record.clone(), (9.0 * 3600.0, 0.0), now, false).is_some());
        assert!(budgets.set(record, (9.0 * 3600.0, 0.0), now, true).is_none());
        assert_eq!(budgets.left(now).collect::<Vec<_>>(), [(project, Some(1.0), Some(1.0))]);
        budgets.remove(project);
        assert_eq!(budgets.refusal(project, (3600.0, 3600.0), now), None);
    }

    #[test]
    fn a_budget_set_while_jobs_run_counts_what_they_hold() {
        let project = Uuid::from_u128(1);
        let mut budgets = Budgets::default();
        let now = at("2026-11-27T10:00:00Z");
        // Placed before the project has a budget: two jobs that may run an hour each.
        budgets.hold(Uuid::from_u128(10), project, (3600.0, 0.0));
        budgets.hold(Uuid::from_u128(11), project, (3600.0, 0.0));
        let record = BudgetRecord {
            project_id: project,
            project_name: "astro".into(),
            budget: ProjectBudget { cpu_hours: Some(3.0), gpu_hours: None, period: BudgetPeriod::Total },
            updated_at: now,
        };
        budgets.set(record, (0.0, 0.0), now, false);
        assert_eq!(budgets.refusal(project, (3600.0, 0.0), now), None, "1 of 3 hours is free");
        assert!(budgets.refusal(project, (2.0 * 3600.0, 0.0), now).unwrap().0.contains("2.00 of them held"));
        // One ends having used half its hour: its hold goes, its use is spent.
        budgets.charge(Uuid::from_u128(10), project, (1800.0, 0.0), now);
        assert_eq!(budgets.refusal(project, (1.5 * 3600.0, 0.0), now), None, "0.5 spent, 1 held, 1.5 free");
    }
}
